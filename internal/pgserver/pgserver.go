// Package pgserver starts a throwaway PostgreSQL server for development, tests
// and the demo: initdb into a temporary directory, a server on a free loopback
// port, and removal of everything when it stops.
//
// When the process runs as root the server runs as the "postgres" operating
// system user, because PostgreSQL refuses to run as root. The server is a
// direct child process with a parent-death signal, so it does not outlive the
// process that started it even after kill -9; a later Start removes the data
// directories such dead servers left behind.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// dirPrefix names the temporary directories this package creates, so stale
// ones can be recognised and removed.
const dirPrefix = "riverbus-pg-"

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found: install them with `apt-get install -y postgresql`, put their directory on PATH, or set DATABASE_URL to use an existing server")

// Opts are the optional settings of Start.
type Opts struct {
	// BinDir is the directory holding initdb and postgres. Empty means look it
	// up: `pg_config --bindir`, PATH, then /usr/lib/postgresql/*/bin (newest
	// version first).
	BinDir string

	// Durable keeps fsync and full_page_writes on. The default turns them
	// off: a throwaway server's data survive a crash of PostgreSQL (commits
	// still reach the operating system before they are acknowledged, which
	// Crash relies on), not one of the machine.
	Durable bool

	// MaxConnections is max_connections. Zero means 400.
	MaxConnections int

	// Settings are extra server settings, passed as -c name=value. They
	// override the defaults, which include max_prepared_transactions = 64
	// (PostgreSQL's own default, 0, refuses PREPARE TRANSACTION, which the
	// tests of two-phase-commit writers need).
	Settings map[string]string

	// Logf, when set, receives progress messages.
	Logf func(format string, args ...any)
}

// Server is a running throwaway PostgreSQL server.
type Server struct {
	binDir  string
	dir     string // temporary directory holding data/ and the socket
	dataDir string
	port    int
	user    string // database superuser name
	cred    *syscall.Credential
	args    []string
	// settings are the -c settings args was built from; a standby starts
	// from them with its own port and socket directory.
	settings map[string]string
	logf     func(format string, args ...any)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// FindBinDir returns the directory holding the PostgreSQL server binaries,
// or ErrNoBinaries.
func FindBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

// HasLibrary reports whether the server binaries FindBinDir finds come with
// the loadable module name (pg_stat_statements, say), in the library
// directory beside the binaries (Debian's and PGDG's layout) or the one
// pg_config reports.
func HasLibrary(name string) bool {
	binDir, err := FindBinDir()
	if err != nil {
		return false
	}
	dirs := []string{filepath.Join(filepath.Dir(binDir), "lib")}
	if out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--pkglibdir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	for _, dir := range dirs {
		if fi, err := os.Stat(filepath.Join(dir, name+".so")); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

func has(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start creates and starts a new throwaway server. Call Stop to stop it and
// remove its files.
func Start(ctx context.Context, opts Opts) (*Server, error) {
	binDir := opts.BinDir
	if binDir != "" && !has(binDir) {
		return nil, fmt.Errorf("%s has no initdb and postgres: %w", binDir, ErrNoBinaries)
	}
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	removeStale()

	s := &Server{binDir: binDir, logf: logf, user: "postgres"}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			return nil, err
		}
		s.cred = cred
	} else if u, err := user.Current(); err == nil {
		s.user = u.Username
	}

	if err := s.makeDir(); err != nil {
		return nil, err
	}
	dir := s.dir

	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", s.dataDir, "-U", s.user, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}

	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.port = port
	maxConns := opts.MaxConnections
	if maxConns == 0 {
		maxConns = 400
	}
	settings := map[string]string{
		"listen_addresses":                    "127.0.0.1",
		"port":                                strconv.Itoa(port),
		"unix_socket_directories":             dir,
		"max_connections":                     strconv.Itoa(maxConns),
		"shared_buffers":                      "128MB",
		"log_min_messages":                    "fatal",
		"logging_collector":                   "off",
		"max_locks_per_transaction":           "256",
		"idle_in_transaction_session_timeout": "0",
		"max_prepared_transactions":           "64",
	}
	if !opts.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	s.setArgs(settings)

	if err := s.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	logf("throwaway PostgreSQL started on 127.0.0.1:%d (data in %s)", port, s.dataDir)
	return s, nil
}

// makeDir creates the server's temporary directory, owned by the user the
// server runs as; the data directory goes inside it.
func (s *Server) makeDir() error {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return fmt.Errorf("create temporary directory: %w", err)
	}
	// Who owns it, for removeStale in other processes: an initdb on a
	// loaded machine may run for minutes before a postmaster.pid exists.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("record the owner of %s: %w", dir, err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("hand %s to the postgres user: %w", dir, err)
		}
	}
	s.dir, s.dataDir = dir, filepath.Join(dir, "data")
	return nil
}

// setArgs builds the server's command line from its data directory and
// settings.
func (s *Server) setArgs(settings map[string]string) {
	s.settings = settings
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s.args = []string{"-D", s.dataDir}
	for _, k := range keys {
		s.args = append(s.args, "-c", k+"="+settings[k])
	}
}

func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// SIGQUIT is PostgreSQL's immediate shutdown: if this process dies
		// without stopping the server, the server goes too.
		Pdeathsig: syscall.SIGQUIT,
		Setpgid:   true,
	}
	logFile, err := os.Create(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return fmt.Errorf("create server log: %w", err)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("postgres exited during start-up: %s", lastLines(string(log), 10))
		case <-ctx.Done():
			s.kill()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
	}
}

// URL returns a connection URL for the named database.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.user, s.port, database)
}

// Port is the loopback TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// Restart stops the server (fast shutdown: open connections are closed) and
// starts it again on the same port with the same data, as `pg_ctl restart
// -m fast` does.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.shutdown(syscall.SIGINT, 30*time.Second); err != nil {
		return err
	}
	return s.start(ctx)
}

// Crash stops the server the way a crash would, with an immediate shutdown
// (no checkpoint; WAL still in the server's buffers, such as that of recent
// asynchronous commits, is lost), and starts it again, which runs crash
// recovery. Tests use it to check what survives.
func (s *Server) Crash(ctx context.Context) error {
	if err := s.shutdown(syscall.SIGQUIT, 30*time.Second); err != nil {
		return err
	}
	return s.start(ctx)
}

// Stop shuts the server down and removes its files. It is safe to call more
// than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	err := s.shutdown(syscall.SIGINT, 15*time.Second)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// shutdown signals the server and waits for it to exit, escalating to an
// immediate shutdown and then SIGKILL.
func (s *Server) shutdown(sig syscall.Signal, wait time.Duration) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{sig, wait}, {syscall.SIGQUIT, 5 * time.Second}, {syscall.SIGKILL, 5 * time.Second}} {
		_ = cmd.Process.Signal(step.sig)
		select {
		case <-exited:
			return nil
		case <-time.After(step.wait):
		}
	}
	return fmt.Errorf("postgres (pid %d) did not exit", cmd.Process.Pid)
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres user, which does not exist (installing the postgresql package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ownerFile, in a server's temporary directory, holds the pid of the
// process that made it.
const ownerFile = "owner.pid"

// alive reports whether the pid a file holds is a running process.
func alive(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// removeStale removes the directories of throwaway servers whose process is
// gone (their owner was killed before it could clean up): neither the
// process that made the directory nor its server runs. A directory without
// an owner file (made by an older build) is left alone for its first
// minute, as it may be starting right now.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		if alive(filepath.Join(dir, ownerFile)) {
			continue // its owner runs: starting, running or stopping it
		}
		fi, err := os.Stat(dir)
		if err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue // may be starting right now
		}
		if alive(filepath.Join(dir, "data", "postmaster.pid")) {
			continue // its server still runs
		}
		_ = os.RemoveAll(dir)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WithDatabase returns rawURL, a URL or a key=value connection string,
// pointing at database instead of the one it names.
func WithDatabase(rawURL, database string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		// key=value form: a later dbname wins.
		return strings.TrimSpace(rawURL) + " dbname=" + database
	}
	u.Path = "/" + database
	return u.String()
}
