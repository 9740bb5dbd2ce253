package exec_test

import (
	"os"
	"testing"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/testharness"
)

// TestMain is here, in package exec_test, because testharness imports
// exec (its /proc reading is exec's): exec's own test files cannot import
// it. The setup is exec.RunTests (exec_test.go).
func TestMain(m *testing.M) {
	os.Exit(exec.RunTests(m, testharness.LeakCheck))
}
