package session

import (
	"syscall"

	"github.com/relayd/relayd/internal/env"
)

// fileUser resolves the "user" of a put or get (section 4.6) as an
// execute's is resolved (env.LookupUser: a name or uid, optionally
// ":group", a member's group unless --allow-any-group, with the user's
// supplementary groups). relayd must be root, unless the user is relayd's
// own; then the credential is nil and relayd's own rights are used.
func fileUser(spec string, anyGroup bool) (*syscall.Credential, error) {
	u, err := env.LookupUser(spec, anyGroup)
	if err == nil {
		err = env.CanBecome(u, spec)
	}
	if err != nil {
		return nil, err
	}
	return u.Cred, nil
}

// asUser runs fn with cred's file-system rights, on a thread of its own
// (env.AsUser). A nil cred, or relayd's own uid, runs fn here.
func asUser(cred *syscall.Credential, fn func() error) error {
	return env.AsUser(cred, fn)
}
