// Tests of the operations files riverbus ships: the Grafana dashboard
// (grafana/riverbus-dashboard.json) and the Prometheus alerting rules
// (prometheus/riverbus-alerts.yml, unit-tested by
// prometheus/riverbus-alerts_test.yml).
package ops_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/metrics"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
)

const (
	dashboardFile = "grafana/riverbus-dashboard.json"
	rulesFile     = "prometheus/riverbus-alerts.yml"
	rulesTestFile = "prometheus/riverbus-alerts_test.yml"

	// EnvRequirePromtool, when set to anything but "" or "0", makes the tests
	// that need promtool fail instead of skipping when it is not on PATH.
	// .ci/run sets it.
	EnvRequirePromtool = "RIVERBUS_REQUIRE_PROMTOOL"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// promtool returns the path of promtool, or skips the test when it is not
// on PATH (fails when EnvRequirePromtool is set).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if v := os.Getenv(EnvRequirePromtool); v != "" && v != "0" {
		t.Fatalf("promtool is not on PATH and %s=%s: install it (Debian: apt-get install prometheus)", EnvRequirePromtool, v)
	}
	t.Skipf("promtool is not on PATH: the alerting rules and the dashboard's queries are not checked (Debian: apt-get install prometheus; "+
		"set %s=1 to fail instead of skipping, as .ci/run does)", EnvRequirePromtool)
	return ""
}

// runPromtool runs promtool with args in dir and fails the test with its
// output when it fails.
func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// rules is the part of a Prometheus rule file the tests read.
type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T, data []byte) *rules {
	t.Helper()
	var r rules
	require.NoError(t, yaml.Unmarshal(data, &r), rulesFile)
	require.NotEmpty(t, r.Groups, rulesFile)
	return &r
}

// readFile reads one of the files under test.
func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return data
}

// dashboardExprs returns the PromQL of every panel target (rows' nested
// panels included), annotation and variable query of a dashboard,
// "where: expr".
func dashboardExprs(t *testing.T, data []byte) map[string]string {
	t.Helper()
	var d struct {
		Panels      []panel `json:"panels"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d), dashboardFile)
	exprs := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			exprs[fmt.Sprintf("annotation %q", a.Name)] = a.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil { // newer Grafana: {"query": "..."}
			var obj struct {
				Query string `json:"query"`
			}
			require.NoError(t, json.Unmarshal(v.Query, &obj), "variable %s", v.Name)
			q = obj.Query
		}
		exprs[fmt.Sprintf("variable %q", v.Name)] = q
	}
	return exprs
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// exportedMetrics returns the names of the metrics riverbus's registry
// (metrics.NewRegistry, served by metrics.Handler) exports, read from it
// with a pool in the database so the per-pool metrics are there, with the
// _sum, _count and _bucket series of summaries and histograms.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx := t.Context()
	db := pgtest.NewPool(t)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	// A process that reports a failure, so the per-operation metrics are
	// there too.
	rec := health.NewRecorder()
	rec.Record(health.OpPoolBatch, "billing", "boom")
	require.NoError(t, health.NewReporter(db, rec, &health.ReporterConfig{Name: "test"}).Report(ctx))
	// A minute for the read: a busy machine is no reason to fail.
	reg := metrics.NewRegistry(db, &metrics.CollectorOpts{MaxAge: -1, Timeout: time.Minute})
	metrics.Handler(reg) // registers promhttp's own counters in reg
	families, err := reg.Gather()
	require.NoError(t, err)

	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		switch f.GetType() {
		case dto.MetricType_SUMMARY:
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"] = true, true
		case dto.MetricType_HISTOGRAM:
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"], names[f.GetName()+"_bucket"] = true, true, true
		}
	}
	require.True(t, names["riverbus_up"])
	require.True(t, names["riverbus_fanout_round_seconds_bucket"], "the fan-out's round histogram is exported")
	// The process's own failure counter (a vector, exported once it
	// counted something: the Recorder above did).
	require.True(t, names["riverbus_process_errors_total"], "the process's failure counter is exported")
	// Every metric the collector describes was collected: none is missing
	// from the set for want of data.
	descs := make(chan *prometheus.Desc, 1000)
	metrics.NewCollector(db, nil).Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		require.True(t, names[m[1]], "%s is described but was not collected: the set of exported names is incomplete", m[1])
	}
	return names
}

// unexported returns, "where: name", the metric names exprs query that are
// not in exported, and the errors of expressions that do not lex.
func unexported(exprs map[string]string, exported map[string]bool) []string {
	var bad []string
	for where, expr := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", where, err))
		}
		for _, n := range names {
			if !exported[n] {
				bad = append(bad, fmt.Sprintf("%s: %s", where, n))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

func rulesExprs(t *testing.T, data []byte) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, g := range readRules(t, data).Groups {
		for _, r := range g.Rules {
			exprs[fmt.Sprintf("rule %s%s", r.Alert, r.Record)] = r.Expr
		}
	}
	return exprs
}

// Every metric the dashboard and the alerting rules query is one riverbus
// exports: a renamed metric fails here, not on an operator's screen.
func TestQueriedMetricsAreExported(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)

	dashboard, alerts := dashboardExprs(t, readFile(t, dashboardFile)), rulesExprs(t, readFile(t, rulesFile))
	require.NotEmpty(t, dashboard)
	require.NotEmpty(t, alerts)
	require.Empty(t, unexported(dashboard, exported), dashboardFile)
	require.Empty(t, unexported(alerts, exported), rulesFile)

	// The check sees a typo, in either file.
	for file, exprs := range map[string]func([]byte) map[string]string{
		dashboardFile: func(b []byte) map[string]string { return dashboardExprs(t, b) },
		rulesFile:     func(b []byte) map[string]string { return rulesExprs(t, b) },
	} {
		data := readFile(t, file)
		at := regexp.MustCompile(`riverbus_pool_lag\b`).FindIndex(data)
		require.NotNil(t, at, file)
		typo := slices.Concat(data[:at[0]], []byte("riverbus_pool_lga"), data[at[1]:])
		bad := unexported(exprs(typo), exported)
		require.Len(t, bad, 1, file)
		require.True(t, strings.HasSuffix(bad[0], ": riverbus_pool_lga"), bad[0])
	}
}

// The dashboard imports into any Grafana: its data source is a variable,
// which every panel and query uses, and its panels have unique ids.
func TestDashboard(t *testing.T) {
	t.Parallel()
	data := readFile(t, dashboardFile)
	var d struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Datasource json.RawMessage `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.NotContains(t, string(data), `"__inputs"`, "the data source is a variable, not an import input")

	const dsRef = `{"type":"prometheus","uid":"${datasource}"}`
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		if len(raw) == 0 || json.Compact(&b, raw) != nil {
			return string(raw)
		}
		return b.String()
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		switch v.Type {
		case "datasource":
			require.Equal(t, "datasource", v.Name)
			require.JSONEq(t, `"prometheus"`, string(v.Query))
		case "query":
			require.Equal(t, dsRef, compact(v.Datasource), "variable %s", v.Name)
		}
	}
	require.Equal(t, []string{"datasource", "job", "pool"}, vars)

	ids := map[int]string{}
	targets := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			require.NotZero(t, p.ID, p.Title)
			require.NotContains(t, ids, p.ID, "panel id of %q and %q", p.Title, ids[p.ID])
			ids[p.ID] = p.Title
			require.NotEmpty(t, p.Title)
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, p.Title)
				require.Equal(t, dsRef, compact(p.Datasource), p.Title)
			}
			for _, tg := range p.Targets {
				require.Equal(t, dsRef, compact(tg.Datasource), "%s %s", p.Title, tg.RefID)
				require.Contains(t, tg.Expr, `job="$job"`, "%s %s: every query is the selected job's", p.Title, tg.RefID)
				targets++
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	require.Positive(t, targets)
}

// The dashboard's queries are valid PromQL: promtool checks them as
// recording rules, with Grafana's interval variables replaced.
func TestDashboardPromQL(t *testing.T) {
	t.Parallel()
	promtool(t)
	exprs := dashboardExprs(t, readFile(t, dashboardFile))
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rs []rule
	for where, expr := range exprs {
		if strings.HasPrefix(where, "variable ") {
			continue // label_values(...) is Grafana's, not PromQL
		}
		for _, v := range []string{"$__rate_interval", "$__interval", "$__range"} {
			expr = strings.ReplaceAll(expr, v, "5m")
		}
		rs = append(rs, rule{Record: fmt.Sprintf("dashboard:query_%d", len(rs)), Expr: expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": rs}}})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.yml"), data, 0o600))
	runPromtool(t, dir, "check", "rules", "dashboard.yml")
}

// promtool checks the rules and runs their unit tests.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool(t)
	runPromtool(t, filepath.Dir(rulesFile), "check", "rules", filepath.Base(rulesFile))
	runPromtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))
}

var backticked = regexp.MustCompile("`([^`]*)`")

// Every alert has a severity, a summary, a description and a command to
// run, and every riverbus command it names is one the CLI has, with flags
// it takes.
func TestAlertRulesAnnotations(t *testing.T) {
	t.Parallel()
	template := regexp.MustCompile(`\{\{[^}]*\}\}`)
	for _, g := range readRules(t, readFile(t, rulesFile)).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			for _, a := range []string{"summary", "description", "command"} {
				require.NotEmpty(t, r.Annotations[a], "%s: annotation %s", r.Alert, a)
			}
			commands := []string{r.Annotations["command"]}
			for _, m := range backticked.FindAllStringSubmatch(r.Annotations["description"], -1) {
				commands = append(commands, m[1])
			}
			for _, c := range commands {
				if !strings.HasPrefix(c, "riverbus ") {
					require.NotEqual(t, r.Annotations["command"], c, "%s: the command is a riverbus command", r.Alert)
					continue
				}
				requireCLICommand(t, r.Alert, template.ReplaceAllString(c, "billing"))
			}
		}
	}
}

// requireCLICommand fails the test unless line ("riverbus dlq list --pool
// billing") is a command of the riverbus CLI with flags it takes:
// `line --help` succeeds and prints the usage of that command, not of a
// parent (an unknown subcommand prints its parent's).
func requireCLICommand(t *testing.T, alert, line string) {
	t.Helper()
	args := strings.Fields(line)[1:]
	var stdout, stderr bytes.Buffer
	code := cli.Main(append(slices.Clone(args), "--help"), &stdout, &stderr)
	require.Zero(t, code, "%s: %q: %s", alert, line, stderr.String())

	// "Usage:\n  riverbus dlq list [flags]": the path is the lower-case words.
	_, usage, ok := strings.Cut(stdout.String(), "Usage:\n")
	require.True(t, ok, "%s: %q printed no usage", alert, line)
	usage, _, _ = strings.Cut(strings.TrimSpace(usage), "\n")
	var path []string
	for _, w := range strings.Fields(usage)[1:] {
		if w != strings.ToLower(w) || strings.HasPrefix(w, "[") || strings.HasPrefix(w, "-") {
			break
		}
		path = append(path, w)
	}
	var words []string // the line's words that are not flags or flag values
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			continue
		}
		if i > 0 && strings.HasPrefix(args[i-1], "--") && !strings.Contains(args[i-1], "=") && flagTakesValue(stdout.String(), args[i-1]) {
			continue
		}
		words = append(words, args[i])
	}
	require.GreaterOrEqual(t, len(words), len(path), "%s: %q", alert, line)
	require.Equal(t, path, words[:len(path)], "%s: %q is not a riverbus command (usage: %s)", alert, line, usage)
	if len(words) > len(path) {
		require.Regexp(t, `[A-Z]`, usage, "%s: %q names no riverbus command, or gives arguments to one that takes none (usage: %s)", alert, line, usage)
	}
}

// flagTakesValue reports whether help lists flag with a value type
// ("--pool string").
func flagTakesValue(help, flag string) bool {
	return regexp.MustCompile(`(?m)^\s+(-\w, )?` + regexp.QuoteMeta(flag) + ` \w`).MatchString(help)
}

// Every alert is unit-tested both firing and not firing.
func TestAlertRulesTested(t *testing.T) {
	t.Parallel()
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(readFile(t, rulesTestFile), &tests))
	require.Equal(t, []string{filepath.Base(rulesFile)}, tests.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range readRules(t, readFile(t, rulesFile)).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			require.True(t, fires[r.Alert], "%s is not tested firing", r.Alert)
			require.True(t, quiet[r.Alert], "%s is not tested not firing", r.Alert)
		}
	}
	require.Positive(t, n)
}

// The table of alerts in docs/operations.md lists every alert of the rules,
// in their order, with its severity.
func TestOperationsDocAlertTable(t *testing.T) {
	t.Parallel()
	var want []string
	for _, g := range readRules(t, readFile(t, rulesFile)).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				want = append(want, r.Alert+" "+r.Labels["severity"])
			}
		}
	}
	row := regexp.MustCompile("(?m)^\\| `(Riverbus\\w+)` \\| (\\w+) \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(readFile(t, "../docs/operations.md")), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	require.Equal(t, want, got, "docs/operations.md's alert table (Dashboards and alerts)")
}

// RiverbusRetentionHeld fires on what riverbus exports when an event that
// claims to occur in 2099 heads the log: the oldest event's age runs on the
// database's append time, so such an event ages like any other (it used to
// read 0, and the alert could never fire). The alert's own expression is
// evaluated by promtool on the series scraped from the registry.
func TestRetentionHeldSeesAFutureOccurredAt(t *testing.T) {
	t.Parallel()
	promtool(t)
	ctx := t.Context()
	db := pgtest.NewPool(t)
	_, err := retention.SetPolicy(ctx, db, true, time.Hour)
	require.NoError(t, err)
	for _, occurred := range []string{"2099-01-01", "now"} {
		_, err := db.Exec(ctx, `INSERT INTO riverbus_event (type, data, occurred_at) VALUES ('thing.happened', '{}', $1::timestamptz)`, occurred)
		require.NoError(t, err)
	}
	// Two days pass (only the owner can rewrite when an event was appended).
	_, err = db.Exec(ctx, `UPDATE riverbus_event SET appended_at = appended_at - interval '2 days'`)
	require.NoError(t, err)

	reg := metrics.NewRegistry(db, &metrics.CollectorOpts{MaxAge: -1, Timeout: time.Minute})
	families, err := reg.Gather()
	require.NoError(t, err)
	scraped := map[string]float64{}
	for _, f := range families {
		if m := f.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
			scraped[f.GetName()] = m[0].GetGauge().GetValue()
		}
	}
	age := scraped["riverbus_oldest_event_age_seconds"]
	require.InDelta(t, (48 * time.Hour).Seconds(), age, 600, "the oldest event was appended two days ago")

	var expr string
	for _, g := range readRules(t, readFile(t, rulesFile)).Groups {
		for _, r := range g.Rules {
			if r.Alert == "RiverbusRetentionHeld" {
				expr = r.Expr
			}
		}
	}
	require.NotEmpty(t, expr, "RiverbusRetentionHeld in %s", rulesFile)
	value := func(name string) string {
		v, ok := scraped[name]
		require.True(t, ok, "%s is exported", name)
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	var series []map[string]string
	for _, name := range []string{"riverbus_oldest_event_age_seconds", "riverbus_retention_keep_seconds", "riverbus_retention_enabled"} {
		series = append(series, map[string]string{"series": name + `{job="riverbus",instance="a:9090"}`, "values": value(name) + "x10"})
	}
	test := map[string]any{
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval":     "1m",
			"input_series": series,
			"promql_expr_test": []map[string]any{{
				"expr":        expr,
				"eval_time":   "5m",
				"exp_samples": []map[string]any{{"labels": `{job="riverbus"}`, "value": age}},
			}},
		}},
	}
	data, err := yaml.Marshal(test)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "held_test.yml"), data, 0o600))
	runPromtool(t, dir, "test", "rules", "held_test.yml")
}
