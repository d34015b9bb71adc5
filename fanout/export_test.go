package fanout

// UsesPlainPath reports whether pool's next batch takes the plain path.
func (f *Fanout) UsesPlainPath(pool string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.plain[pool]
	return k == plainAll || k == plainTyped
}
