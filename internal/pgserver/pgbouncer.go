package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPgBouncer is returned by StartPgBouncer when the pgbouncer binary
// cannot be found.
var ErrNoPgBouncer = errors.New("pgbouncer not found: install it with `apt-get install -y pgbouncer` (the tests of riverbus behind a connection pooler run a real one)")

// PoolMode is PgBouncer's pool_mode: when a server connection goes back to
// the pool.
type PoolMode string

const (
	// PoolModeSession keeps a server connection for the client's whole
	// session: what riverbus's own processes need.
	PoolModeSession PoolMode = "session"
	// PoolModeTransaction returns the server connection at the end of each
	// transaction: session state (LISTEN, session locks, SET, named
	// prepared statements) moves to whichever client runs next on it.
	PoolModeTransaction PoolMode = "transaction"
)

// PgBouncerOpts are the optional settings of StartPgBouncer.
type PgBouncerOpts struct {
	// PoolMode is pool_mode. Empty means PoolModeTransaction.
	PoolMode PoolMode
	// PoolSize is default_pool_size: server connections per database and
	// user. Zero means 20.
	PoolSize int
	// Binary is the pgbouncer executable. Empty means PATH, then
	// /usr/sbin/pgbouncer (Debian's package).
	Binary string
}

// PgBouncer is a running PgBouncer in front of a Server.
type PgBouncer struct {
	dir  string
	port int
	user string

	cmd     *exec.Cmd
	exited  chan struct{}
	stop    sync.Once
	stopErr error
}

// FindPgBouncer returns the path of the pgbouncer binary, or ErrNoPgBouncer.
func FindPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if fi, err := os.Stat(debian); err == nil && !fi.IsDir() {
		return debian, nil
	}
	return "", ErrNoPgBouncer
}

// StartPgBouncer starts a PgBouncer on a free loopback port that forwards
// every database of s, as s's superuser (trust authentication, like s).
// Call Stop to stop it; it also dies with this process.
func (s *Server) StartPgBouncer(ctx context.Context, opts PgBouncerOpts) (*PgBouncer, error) {
	return startPgBouncer(ctx, s.port, s.user, s.cred, opts)
}

// StartPgBouncerFor is StartPgBouncer for a throwaway server that another
// process started (a test binary sharing one): serverURL is a postgres://
// URL of it, on 127.0.0.1, whose user is its superuser.
func StartPgBouncerFor(ctx context.Context, serverURL string, opts PgBouncerOpts) (*PgBouncer, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" || u.User == nil {
		return nil, fmt.Errorf("pgbouncer: %q is not a postgres:// URL with a user", serverURL)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %q has no port", serverURL)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	return startPgBouncer(ctx, port, u.User.Username(), cred, opts)
}

func startPgBouncer(ctx context.Context, serverPort int, user string, cred *syscall.Credential, opts PgBouncerOpts) (*PgBouncer, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = FindPgBouncer(); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("%s: %w", bin, ErrNoPgBouncer)
	}
	mode := opts.PoolMode
	if mode == "" {
		mode = PoolModeTransaction
	}
	poolSize := opts.PoolSize
	if poolSize == 0 {
		poolSize = 20
	}
	dir, err := os.MkdirTemp("", "riverbus-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: create temporary directory: %w", err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b := &PgBouncer{dir: dir, port: port, user: user}
	// The fallback database "*" forwards any database name to the server,
	// so each test's own database is reachable through one PgBouncer.
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
server_login_retry = 1
logfile = %s
`, serverPort, port, filepath.Join(dir, "userlist.txt"), mode, poolSize, filepath.Join(dir, "pgbouncer.log"))
	files := map[string]string{
		"pgbouncer.ini": ini,
		"userlist.txt":  fmt.Sprintf("%q \"\"\n", user),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: write %s: %w", name, err)
		}
	}
	// PgBouncer refuses to run as root: it runs as the server's user.
	if cred != nil {
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				_ = os.RemoveAll(dir)
				return nil, fmt.Errorf("pgbouncer: hand %s to the postgres user: %w", p, err)
			}
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(b.exited)
	}()
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// waitReady waits until a query through PgBouncer reaches the server.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cfg, err := pgx.ParseConfig(b.URL("postgres"))
		if err != nil {
			return err
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer exited during start-up: %s", b.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not pass a query within 30s: %w (log: %s)", err, b.logTail())
		}
	}
}

func (b *PgBouncer) logTail() string {
	var all []string
	for _, name := range []string{"stderr.log", "pgbouncer.log"} {
		if data, err := os.ReadFile(filepath.Join(b.dir, name)); err == nil {
			all = append(all, lastLines(string(data), 10))
		}
	}
	return strings.Join(all, "\n")
}

// Port is the loopback TCP port PgBouncer listens on.
func (b *PgBouncer) Port() int { return b.port }

// URL returns a URL for the named database through PgBouncer, with pgx's
// default settings: add default_query_exec_mode as a client would.
func (b *PgBouncer) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(b.user), b.port, url.PathEscape(database))
}

// Through returns directURL (a URL of the server PgBouncer fronts, such as
// one pgtest made) with PgBouncer's host and port instead of the server's.
func (b *PgBouncer) Through(directURL string) (string, error) {
	u, err := url.Parse(directURL)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("pgbouncer: %q is not a postgres:// URL", directURL)
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.port)
	return u.String(), nil
}

// Stop stops PgBouncer and removes its files. It is safe to call more than
// once.
func (b *PgBouncer) Stop() error {
	b.stop.Do(func() {
		// SIGINT: PgBouncer's immediate shutdown (SIGTERM waits for clients).
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
			b.stopErr = fmt.Errorf("pgbouncer (pid %d) did not exit on SIGINT", b.cmd.Process.Pid)
		}
		b.stopErr = errors.Join(b.stopErr, os.RemoveAll(b.dir))
	})
	return b.stopErr
}
