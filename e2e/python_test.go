//go:build docker || k8s

package e2e

import (
	"os"
	"os/exec"
	"testing"
)

// systemPython is the interpreter the Python client's tests run with
// (make pytest): /usr/bin/python3, where .ci/run installs the Debian
// packages they need (python3-anyio, python3-trio, python3-kubernetes),
// whatever python3 comes first on PATH; else that one. The tests under the
// docker and k8s tags run the Python client's: without python3 they fail.
func systemPython(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/usr/bin/python3"); err == nil && fi.Mode()&0o111 != 0 {
		return "/usr/bin/python3"
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("no python3: the Python client's tests need it (.ci/run installs it)")
	}
	return python
}
