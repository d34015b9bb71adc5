package horizon

import "time"

// SetLockHeldAfter shortens LockHeldAfter for s.
func (s *Service) SetLockHeldAfter(d time.Duration) { s.lockMissed.after = d }
