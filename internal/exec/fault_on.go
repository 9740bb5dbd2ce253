//go:build relayd_faults

package exec

import (
	"errors"
	"os"
)

// faultProcRoot lets tests built with the relayd_faults tag fault the
// scope evidence: RELAYD_FAULT_PROC_ROOT replaces /proc for scope looks.
func faultProcRoot() string { return os.Getenv("RELAYD_FAULT_PROC_ROOT") }

// faultScopeSetup fails every scope setup when RELAYD_FAULT_SCOPE_SETUP is set.
func faultScopeSetup() error {
	if os.Getenv("RELAYD_FAULT_SCOPE_SETUP") != "" {
		return errors.New("exec: scope setup failed (RELAYD_FAULT_SCOPE_SETUP test fault)")
	}
	return nil
}
