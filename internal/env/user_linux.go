package env

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// User is an account subjects run as: the credential (uid, gid,
// supplementary groups) and what the user database says of it.
type User struct {
	Cred *syscall.Credential
	Name string // the login name; "" when the uid has no entry
	Home string // the home directory; "" when unknown
}

// Vars are the variables a login gives the user (HOME, USER, LOGNAME),
// those the user database knows.
func (u *User) Vars() map[string]string {
	vars := map[string]string{}
	if u.Home != "" {
		vars["HOME"] = u.Home
	}
	if u.Name != "" {
		vars["USER"], vars["LOGNAME"] = u.Name, u.Name
	}
	return vars
}

// LookupUser resolves spec, "USER" or "USER:GROUP", each a name or a
// number, to the user a subject runs as: its uid, the group (else the
// user's primary gid) and the user's supplementary groups. A numeric uid
// with no entry in the user database is unknown: its groups and home
// cannot be known. Its errors say which part is unknown.
func LookupUser(spec string) (*User, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || hasGroup && group == "" {
		return nil, fmt.Errorf("%q is not USER or USER:GROUP", spec)
	}
	u, err := user.Lookup(name)
	if err != nil {
		if _, numErr := strconv.ParseUint(name, 10, 32); numErr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("no user %q on this system (%v)", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q has a uid or gid that is not a number (%s, %s)", name, u.Uid, u.Gid)
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of user %q: %v", name, err)
	}
	groups := make([]uint32, 0, len(ids)+1)
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			groups = append(groups, uint32(g))
		}
	}
	if hasGroup {
		g, err := user.LookupGroup(group)
		if err != nil {
			if _, numErr := strconv.ParseUint(group, 10, 32); numErr == nil {
				g, err = user.LookupGroupId(group)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("no group %q on this system (%v)", group, err)
		}
		if gid, err = strconv.ParseUint(g.Gid, 10, 32); err != nil {
			return nil, fmt.Errorf("group %q has a gid that is not a number (%s)", group, g.Gid)
		}
		// The group is the subject's too, as newgrp makes it; the user's
		// primary group stays among the supplementary ones only when
		// /etc/group lists the user in it.
		groups = withoutPrimary(groups, u.Gid)
		groups = append(groups, uint32(gid))
	}
	return &User{Cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: dedupe(groups)}, Name: u.Username, Home: u.HomeDir}, nil
}

// withoutPrimary drops the user's primary gid, which GroupIds always
// lists, when /etc/group does not name the user as its member.
func withoutPrimary(groups []uint32, primary string) []uint32 {
	g, err := user.LookupGroupId(primary)
	if err != nil {
		return groups
	}
	p, _ := strconv.ParseUint(g.Gid, 10, 32)
	out := groups[:0]
	for _, id := range groups {
		if uint64(id) != p {
			out = append(out, id)
		}
	}
	return out
}

func dedupe(ids []uint32) []uint32 {
	seen := map[uint32]bool{}
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// CanBecome reports whether relayd may run subjects as u: as root, or as
// the user relayd is itself (nothing to switch; Cred is then cleared, so
// that no setgroups is tried). spec names u in the error.
func CanBecome(u *User, spec string) error {
	euid := os.Geteuid()
	if euid == 0 {
		return nil
	}
	if uint64(euid) == uint64(u.Cred.Uid) && uint64(os.Getegid()) == uint64(u.Cred.Gid) {
		u.Cred = nil
		return nil
	}
	return fmt.Errorf("running subjects as %q needs relayd to run as root (it runs as uid %d)", spec, euid)
}

// SubjectUser resolves --subject-user (a name or a numeric uid) to the
// credential subjects run with: its uid, primary gid and supplementary
// groups. Switching needs root; a relayd that is not root refuses.
func SubjectUser(spec string) (*syscall.Credential, error) {
	u, err := SubjectAccount(spec)
	if err != nil {
		return nil, err
	}
	return u.Cred, nil
}

// SubjectAccount is SubjectUser with what the user database says of the
// user (its HOME, its name), for the subjects' environment.
func SubjectAccount(spec string) (*User, error) {
	u, err := LookupUser(spec)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 && uint64(os.Geteuid()) != uint64(u.Cred.Uid) {
		return nil, fmt.Errorf("running subjects as %q needs relayd to run as root (it runs as uid %d)", spec, os.Geteuid())
	}
	return u, nil
}
