package exec

// MembersOf lists the members of several scopes, as Members on each would,
// with one look of the process table for all the process-group scopes of a
// tracker: Members on each walks the whole table once per scope, so that
// verify, which looks at every scope kept for its survivors, cost time in
// the square of their number (24 s for 1,000 kept scopes). A cgroup scope's
// look is its own and costs the same either way. errs[i] is the error of
// scopes[i]'s look, as from Members.
func MembersOf(scopes []Scope) (members [][]Member, errs []error) {
	members = make([][]Member, len(scopes))
	errs = make([]error, len(scopes))
	byTracker := map[*Tracker][]int{}
	for i, sc := range scopes {
		if pg, ok := sc.(*pgScope); ok {
			byTracker[pg.t] = append(byTracker[pg.t], i)
			continue
		}
		members[i], errs[i] = sc.Members()
	}
	for t, idx := range byTracker {
		t.mu.Lock()
		err := t.refreshLocked()
		for _, i := range idx {
			s := scopes[i].(*pgScope)
			errs[i] = err
			if err == nil && !s.live {
				errs[i] = s.lookLocked()
			}
			if errs[i] == nil {
				members[i] = s.membersLocked()
			}
		}
		t.mu.Unlock()
	}
	return members, errs
}
