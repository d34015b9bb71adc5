package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/internal/pgserver"
)

// EnvOwnServer names the variable that, set to 1, gives each test binary a
// throwaway server of its own instead of the shared one (the behaviour
// before servers were shared; for telling a sharing problem from a test's).
const EnvOwnServer = "RIVERBUS_TEST_OWN_SERVER"

// envServe, set on a re-executed test binary, makes it the supervisor of
// the shared server whose directory it names (see init).
const envServe = "RIVERBUS_PGTEST_SERVE"

// sharedMaxConnections is the shared server's max_connections: two test
// binaries run at once on two cores (go test -p), each with its parallel
// tests, pools of 20 and child processes.
const sharedMaxConnections = 1000

// usersLock is this process's shared lock on users.lock, held while it
// uses the shared server; a package variable, so no finalizer closes it.
var usersLock *os.File

// sharedState is what the supervisor writes to server.json once the server
// accepts connections.
type sharedState struct {
	URL string `json:"url"`
	Pid int    `json:"pid"` // the supervisor's
	Err string `json:"err,omitempty"`
}

func init() {
	// A test binary re-executed as the supervisor serves before any test
	// package's own init or TestMain runs (the integration tests' TestMain
	// builds binaries first, which the supervisor must not repeat).
	if dir := os.Getenv(envServe); dir != "" {
		os.Exit(serve(dir))
	}
}

// sharedDir returns the directory that coordinates the test binaries of
// one module and one user: its locks, the server's state, the registered
// runs. It is created private to the user; one that is not is refused.
func sharedDir() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := sharedDirOf(root)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory private to this user", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// sharedDirOf names the directory of the module whose root is root.
func sharedDirOf(root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(os.TempDir(), fmt.Sprintf("riverbus-pgtest-%d-%s", os.Geteuid(), hex.EncodeToString(sum[:6])))
}

// moduleRoot is the directory of the go.mod above the working directory
// (go test runs a test binary in its package's directory), or the working
// directory when there is none.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return wd, nil
		}
	}
}

// lockFile opens (creating) path and takes the flock how on it; the kernel
// releases it when the process ends, however it ends.
func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// attachShared returns the URL of the shared server, starting it (through
// a supervisor) when none runs. The caller uses it until it exits: it holds
// a shared lock on users.lock, which the kernel drops when it exits.
func attachShared(ctx context.Context) (string, error) {
	dir, err := sharedDir()
	if err != nil {
		return "", fmt.Errorf("shared test server: %w", err)
	}
	start, err := lockFile(filepath.Join(dir, "start.lock"), syscall.LOCK_EX)
	if err != nil {
		return "", fmt.Errorf("shared test server: %w", err)
	}
	defer start.Close() // unlocks

	st, err := readState(dir)
	if err != nil || !alive(st.Pid) || !reachable(ctx, st.URL) {
		if st, err = launchSupervisor(ctx, dir); err != nil {
			return "", fmt.Errorf("shared test server: %w", err)
		}
	}
	// The supervisor checks for users only while it holds start.lock, which
	// this process holds: it cannot stop between the check above and this.
	// The file stays open (and locked) until the process exits.
	if usersLock, err = lockFile(filepath.Join(dir, "users.lock"), syscall.LOCK_SH); err != nil {
		return "", fmt.Errorf("shared test server: %w", err)
	}
	registerRun(dir)
	return st.URL, nil
}

func readState(dir string) (sharedState, error) {
	var st sharedState
	data, err := os.ReadFile(filepath.Join(dir, "server.json"))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func reachable(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// registerRun records the go command that runs this test binary, when it
// is one: the supervisor keeps the server while it lives, so the packages
// `go test ./...` runs one after the other (with builds between them) find
// the server still there. A binary run by hand registers nothing; the
// server then goes with its last user.
func registerRun(dir string) {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return
	}
	started, ok := startTime(ppid)
	if !ok {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "runs", fmt.Sprintf("%d-%s", ppid, started)), nil, 0o600)
}

// startTime is the process's start time in clock ticks since boot (field
// 22 of /proc/pid/stat): with the pid, it names the process even after its
// pid is reused.
func startTime(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}

// liveRuns reports whether a registered go command still runs, and forgets
// those that ended.
func liveRuns(dir string) bool {
	entries, _ := os.ReadDir(filepath.Join(dir, "runs"))
	live := false
	for _, e := range entries {
		pidStr, started, _ := strings.Cut(e.Name(), "-")
		pid, _ := strconv.Atoi(pidStr)
		if now, ok := startTime(pid); ok && now == started {
			live = true
			continue
		}
		_ = os.Remove(filepath.Join(dir, "runs", e.Name()))
	}
	return live
}

// launchSupervisor starts this test binary again as the supervisor of a
// new shared server and waits until the server accepts connections. The
// supervisor is in a session of its own, with no terminal and none of this
// process's output (go test waits for a test binary's output to close), so
// it outlives this binary. Called with start.lock held.
func launchSupervisor(ctx context.Context, dir string) (sharedState, error) {
	exe, err := os.Executable()
	if err != nil {
		return sharedState{}, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return sharedState{}, err
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return sharedState{}, err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envServe+"="+dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{w} // fd 3: the supervisor reports there once
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return sharedState{}, fmt.Errorf("start supervisor: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release() // never waited for: it outlives this process

	type result struct {
		st  sharedState
		err error
	}
	done := make(chan result, 1)
	go func() {
		var st sharedState
		line, err := bufio.NewReader(r).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &st)
		}
		if err == nil && st.Err != "" {
			err = errors.New(st.Err)
		}
		done <- result{st, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "supervisor.log"))
			return sharedState{}, fmt.Errorf("supervisor (pid %d): %w %s", pid, res.err, bytes.TrimSpace(log))
		}
		return res.st, nil
	case <-ctx.Done():
		_ = syscall.Kill(pid, syscall.SIGTERM)
		return sharedState{}, ctx.Err()
	}
}

// serve is the supervisor: it starts the shared server, reports its URL on
// fd 3, and stops it as soon as no test binary holds users.lock and no
// registered go command runs, or on SIGINT, SIGTERM or SIGHUP. The server
// is its child with a parent-death signal: it cannot outlive the
// supervisor, even one killed with SIGKILL.
func serve(dir string) int {
	report := os.NewFile(3, "report")
	fail := func(err error) int {
		_ = json.NewEncoder(report).Encode(sharedState{Err: err.Error()})
		report.Close()
		fmt.Fprintln(os.Stderr, "pgtest supervisor:", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgserver.Start(ctx, pgserver.Opts{MaxConnections: sharedMaxConnections})
	cancel()
	if err != nil {
		return fail(err)
	}
	st := sharedState{URL: srv.URL("postgres"), Pid: os.Getpid()}
	data, _ := json.Marshal(st)
	tmp := filepath.Join(dir, "server.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = srv.Stop()
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "server.json")); err != nil {
		_ = srv.Stop()
		return fail(err)
	}
	_ = json.NewEncoder(report).Encode(st)
	report.Close()
	fmt.Fprintf(os.Stderr, "pgtest supervisor: serving %s\n", st.URL)

	stop := func(why string) int {
		// Forget the state first, under start.lock: a test binary that
		// comes now starts a new server rather than attach to this one.
		if cur, err := readState(dir); err == nil && cur.Pid == st.Pid {
			_ = os.Remove(filepath.Join(dir, "server.json"))
		}
		fmt.Fprintf(os.Stderr, "pgtest supervisor: %s: stopping\n", why)
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest supervisor:", err)
			return 1
		}
		return 0
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			return stop(sig.String())
		case <-tick.C:
		}
		start, err := lockFile(filepath.Join(dir, "start.lock"), syscall.LOCK_EX)
		if err != nil {
			return stop(err.Error())
		}
		users, err := lockFile(filepath.Join(dir, "users.lock"), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if !liveRuns(dir) {
				code := stop("no test binary uses the server")
				users.Close()
				start.Close()
				return code
			}
			users.Close()
		}
		start.Close()
	}
}
