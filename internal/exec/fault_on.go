//go:build relayd_faults

package exec

import "os"

// faultProcRoot lets tests built with the relayd_faults tag fault the
// scope evidence: RELAYD_FAULT_PROC_ROOT replaces /proc for scope looks.
func faultProcRoot() string { return os.Getenv("RELAYD_FAULT_PROC_ROOT") }
