package pgserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming standby of s, as an operator would:
// pg_basebackup -R (which writes primary_conninfo and standby.signal) into
// a new temporary directory, then a server of its own on a free port with
// s's settings. Replication is asynchronous (s names no synchronous
// standby). Call Stop on the standby to stop it and remove its files.
func (s *Server) StartStandby(ctx context.Context) (*Server, error) {
	st := &Server{binDir: s.binDir, logf: s.logf, user: s.user, cred: s.cred}
	if err := st.makeDir(); err != nil {
		return nil, err
	}
	dir := st.dir
	// initdb --auth=trust allows replication connections from loopback.
	backup := exec.CommandContext(ctx, filepath.Join(s.binDir, "pg_basebackup"),
		"-D", st.dataDir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", s.user)
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := backup.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_basebackup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	st.port = port
	settings := maps.Clone(s.settings)
	settings["port"] = strconv.Itoa(port)
	settings["unix_socket_directories"] = dir
	st.setArgs(settings)
	if err := st.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	st.logf("throwaway standby of 127.0.0.1:%d started on 127.0.0.1:%d", s.port, port)
	return st, nil
}

// CutReplication stops the standby's WAL receiver and keeps it from
// reconnecting (primary_conninfo emptied and reloaded, which PostgreSQL 13
// and later apply without a restart): from then on the primary's commits
// no longer reach it, as in a network partition.
func (s *Server) CutReplication(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the standby: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''"); err != nil {
		return fmt.Errorf("cut replication: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("cut replication: %w", err)
	}
	return waitFor(ctx, conn, "SELECT NOT EXISTS (SELECT FROM pg_stat_wal_receiver)", "the WAL receiver to stop")
}

// CaughtUp waits until the standby has replayed everything the primary
// had written when it was called.
func (s *Server) CaughtUp(ctx context.Context, primary *Server) error {
	pconn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the primary: %w", err)
	}
	defer pconn.Close(ctx)
	var lsn string
	if err := pconn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("read the primary's WAL position: %w", err)
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the standby: %w", err)
	}
	defer conn.Close(ctx)
	return waitFor(ctx, conn, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", "the standby to replay "+lsn, lsn)
}

// Promote promotes a standby to primary (pg_promote) and waits until it
// accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the standby: %w", err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("promote: the standby did not finish promotion within 60s")
	}
	return nil
}

// Kill ends the server and every backend at once with SIGKILL, as kill -9
// of the whole process group would: nothing is flushed or replicated. The
// files stay until Stop.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

func waitFor(ctx context.Context, conn *pgx.Conn, query, what string, args ...any) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ok bool
		if err := conn.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not happen within 60s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
