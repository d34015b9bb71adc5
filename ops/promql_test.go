package ops_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// promqlKeywords are the words of PromQL that are not metric names when no
// parenthesis follows them (matched without regard to case, as PromQL does):
// operators, modifiers, literals, and the aggregations, which a by or
// without clause may separate from their parenthesis.
var promqlKeywords = []string{
	"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan",
	"by", "without", "on", "ignoring", "group_left", "group_right",
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio",
}

// promqlLabelLists are the words followed by a parenthesized list of label
// names, not of expressions.
var promqlLabelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

var grafanaLabelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*(?:,\s*[A-Za-z_][A-Za-z0-9_]*\s*)?\)\s*$`)

// metricNames returns the metric names an expression queries, in order of
// appearance, each once. expr is PromQL, with Grafana's variables ($job,
// ${pool}, $__rate_interval) allowed, or a Grafana variable query
// label_values(EXPR, label) or label_values(label).
//
// It lexes rather than parses: strings, comments, label matchers {…} and
// ranges […] are skipped (a __name__="x" matcher names x), label lists after
// by, without, on, ignoring, group_left and group_right are skipped, a word
// followed by "(" is a function, and a word that is a keyword is not a
// metric. Every other word is a metric name (so a metric named like an
// aggregation, "max", would go unseen). An unbalanced bracket or
// string is an error, so a mangled expression does not pass for one without
// metrics.
func metricNames(expr string) ([]string, error) {
	if m := grafanaLabelValues.FindStringSubmatch(expr); m != nil {
		if !strings.ContainsAny(m[1], "{(") && !strings.Contains(expr, ",") {
			return nil, nil // label_values(label): no metric
		}
		expr = m[1]
	}
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	isWordStart := func(c byte) bool { return c == '_' || c == ':' || 'a' <= c|0x20 && c|0x20 <= 'z' }
	isWord := func(c byte) bool { return isWordStart(c) || '0' <= c && c <= '9' }
	// skipTo returns the index just after the bracket that closes the one at
	// i, skipping strings.
	skipTo := func(i int, open, closing byte) (int, error) {
		depth := 0
		for j := i; j < len(expr); j++ {
			switch c := expr[j]; c {
			case '"', '\'', '`':
				end, err := skipString(expr, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case open:
				depth++
			case closing:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %q at %d in %q", open, i, expr)
	}
	nameMatcher := regexp.MustCompile(`__name__\s*=\s*"([^"]+)"`)

	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '{':
			end, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			if m := nameMatcher.FindStringSubmatch(expr[i:end]); m != nil {
				add(m[1])
			}
			i = end
		case c == '[':
			end, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '}' || c == ']':
			return nil, fmt.Errorf("unbalanced %q at %d in %q", c, i, expr)
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(expr) && expr[i] == '{' {
				end, err := skipTo(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
			}
			for i < len(expr) && isWord(expr[i]) {
				i++
			}
		case '0' <= c && c <= '9' || c == '.': // a number or a duration
			for i < len(expr) && (isWord(expr[i]) || expr[i] == '.') {
				i++
			}
		case isWordStart(c):
			start := i
			for i < len(expr) && isWord(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := i
			for next < len(expr) && (expr[next] == ' ' || expr[next] == '\t' || expr[next] == '\n') {
				next++
			}
			lower := strings.ToLower(word)
			switch {
			case next < len(expr) && expr[next] == '(' && slices.Contains(promqlLabelLists, lower):
				end, err := skipTo(next, '(', ')')
				if err != nil {
					return nil, err
				}
				i = end
			case next < len(expr) && expr[next] == '(': // a function or an aggregation
			case slices.Contains(promqlKeywords, lower):
			default:
				add(word)
			}
		default:
			i++
		}
	}
	return names, nil
}

// skipString returns the index just after the string literal that starts
// at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d in %q", i, s)
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`riverbus_up == 0`: {"riverbus_up"},
		`max without (instance) (riverbus_horizon_problem{blocks="true", problem=~"seq.*"}) == 1`:                                                   {"riverbus_horizon_problem"},
		`max by (job) (riverbus_horizon{job="$job"}) - on (job) group_right max by (job, pool) (riverbus_pool_cursor{job="$job", pool=~"${pool}"})`: {"riverbus_horizon", "riverbus_pool_cursor"},
		`sum(rate(riverbus_pool_events_fanned_out_total[$__rate_interval])) BY (pool) OFFSET 5m`:                                                    {"riverbus_pool_events_fanned_out_total"},
		`(a - b) > 0 and c > 120 unless d == 1 or e bool > 1 atan2 f`:                                                                               {"a", "b", "c", "d", "e", "f"},
		`count(riverbus_horizon_problem == 1) or vector(0)`:                                                                                         {"riverbus_horizon_problem"},
		`max_over_time(riverbus_pool_lag[1h:5m]) # riverbus_not_a_metric`:                                                                           {"riverbus_pool_lag"},
		`{__name__="riverbus_up", job="x"}`:                                                                                                         {"riverbus_up"},
		`label_values(riverbus_up, job)`:                                                                                                            {"riverbus_up"},
		`label_values(riverbus_pool_lag{job="$job"}, pool)`:                                                                                         {"riverbus_pool_lag"},
		`label_values(job)`: nil,
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) > Inf`: {"x_bucket"},
		`riverbus_up{job="a}b"} offset 1h`:                                 {"riverbus_up"},
		`1e3 * riverbus_horizon_age_seconds`:                               {"riverbus_horizon_age_seconds"},
	} {
		got, err := metricNames(expr)
		require.NoError(t, err, expr)
		require.Equal(t, want, got, expr)
	}
	for _, bad := range []string{`riverbus_up{job="a"`, `rate(x[5m)`, `x{job="a}`, `x]`} {
		_, err := metricNames(bad)
		require.Error(t, err, bad)
	}
}
