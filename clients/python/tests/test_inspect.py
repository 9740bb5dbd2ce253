"""relayd_client.inspect against a real relayd, through inspect's interface
as documented, with a stand-in for inspect_ai's base classes and result
types written here (tests/stand_ins; inspect_ai cannot be installed on this
project's machines). One test per behaviour of inspect's portable sandbox
self-check (inspect_ai/util/_sandbox/self_check.py), same names, plus
output limits, the README's snippet and the bridge argv.

LocalSelfCheck reaches the fixture's relayd with ``relayd bridge --socket``
as the exec channel. DockerSelfCheck runs the same tests in a container
(``docker exec -i C relayd bridge``) when RELAYD_INSPECT_CONTAINER names
it and RELAYD_TOKEN_FILE holds its token (e2e TestDockerInspectAdapter),
and is skipped otherwise."""

import asyncio
import os
import re
import secrets
import sys
import unittest
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))

import inspect_ai.util as iu  # noqa: E402  (the stand-in)
from relayd_fixture import REPO, Relayd, relayd_binary  # noqa: E402

from relayd_client import inspect as ri  # noqa: E402

MiB = 1024 * 1024
# relayd's limits fitted to inspect's: 50 MiB inputs, 10 MiB of output and more.
RELAYD_ARGS = ("--max-line-bytes", "160MiB", "--max-stdout-bytes", "11MiB")


def marker(what: str) -> str:
    return f"{what}_{secrets.token_hex(8)}"


class SelfCheck:
    """The self-check's behaviours; a subclass says how to reach relayd."""

    env: Any
    config: Any = None

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 5.0
        self.envs: List[Any] = []
        self.env = await self.sample()

    async def asyncTearDown(self) -> None:
        await ri.RelaydSandboxEnvironment.sample_cleanup("t", self.config, {str(i): e for i, e in enumerate(self.envs)},
                                                         False)

    async def sample(self, **extra: Any) -> Any:
        config = dict(self.config or {}, **extra) if extra else self.config
        envs: Dict[str, Any] = await iu.REGISTRY["relayd"].sample_init("t", config, {})
        self.envs.append(envs["default"])
        return envs["default"]

    async def nobody(self) -> Any:
        """A sandbox whose default user is nobody, in a directory it owns."""
        d = "/tmp/relayd-inspect-" + secrets.token_hex(4)
        r = await self.env.exec(["sh", "-c", f"mkdir -p {d} && chown nobody {d}"])
        self.assertTrue(r.success, r.stderr)
        return await self.sample(user="nobody", cwd=d)

    async def gone(self, mark: str) -> None:
        r = await self.env.exec(["sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
                                 f" | grep '{mark}' | grep -v grep"])
        self.assertFalse(r.success and r.stdout.strip(), f"{mark} still runs: {r.stdout}")

    async def rm(self, path: str) -> None:
        r = await self.env.exec(["rm", "-rf", "--", path])
        self.assertTrue(r.success, r.stderr)

    # --- files

    async def test_read_and_write_file_text(self) -> None:
        await self.env.write_file("rw.file", "great #content\nincluding newlines\r\n")
        self.assertEqual(await self.env.read_file("rw.file", text=True), "great #content\nincluding newlines\r\n")

    async def test_read_and_write_file_binary(self) -> None:
        await self.env.write_file("rwb.file", b"\xc3\x28")
        self.assertEqual(await self.env.read_file("rwb.file", text=False), b"\xc3\x28")

    async def test_read_and_write_large_file_binary(self) -> None:
        data = b"\xc3" * (50 * MiB)
        await self.env.write_file("large.file", data)
        self.assertEqual(await self.env.read_file("large.file", text=False), data)
        await self.rm("large.file")

    async def test_write_file_text_utf(self) -> None:
        text = "✨☽︎✨🌞︎︎✨🚀︎✨ café"
        await self.env.write_file("utf.file", text)
        got = await self.env.read_file("utf.file", text=True)
        self.assertIsInstance(got, str)
        self.assertEqual(got, text)

    async def test_read_and_write_file_including_directory_absolute(self) -> None:
        d = "/tmp/" + marker("rw_abs")
        await self.env.write_file(d + "/test.file", "absolutely")
        self.assertEqual(await self.env.read_file(d + "/test.file"), "absolutely")
        await self.rm(d)

    async def test_read_and_write_file_including_directory_relative(self) -> None:
        await self.env.write_file("rw_rel/test.file", "relatively")
        self.assertEqual(await self.env.read_file("rw_rel/test.file"), "relatively")
        self.assertTrue((await self.env.exec(["test", "-f", "test.file"], cwd="rw_rel")).success)
        await self.rm("rw_rel")

    async def test_read_file_zero_length(self) -> None:
        await self.env.exec(["touch", "zero.file"])
        self.assertEqual(await self.env.read_file("zero.file", text=True), "")

    async def test_read_file_not_found(self) -> None:
        with self.assertRaises(FileNotFoundError) as e:
            await self.env.read_file("nonexistent", text=True)
        self.assertIn("nonexistent", str(e.exception))

    async def test_read_file_not_allowed(self) -> None:
        env = await self.nobody()
        await env.write_file("na.file", "inaccessible #content")
        await env.exec(["chmod", "-r", "na.file"])
        with self.assertRaises(PermissionError) as e:
            await env.read_file("na.file", text=True)
        self.assertIn("na.file", str(e.exception))

    async def test_read_file_is_directory(self) -> None:
        with self.assertRaises(IsADirectoryError) as e:
            await self.env.read_file("/etc", text=True)
        self.assertIn("directory", str(e.exception))

    async def test_read_file_nonsense_name(self) -> None:
        with self.assertRaises(FileNotFoundError) as e:
            await self.env.read_file("https:/en.wikipedia.org/wiki/Bart%C5%82omiej_Kasprzykowski", text=True)
        self.assertIn("wikipedia", str(e.exception))

    async def test_read_file_limit(self) -> None:
        await self.env.write_file("limit.file", "a" * 2048)
        with iu.override_max_read_file_size(1024):
            with self.assertRaises(iu.OutputLimitExceededError) as e:
                await self.env.read_file("limit.file", text=True)
        self.assertIn("limit of 1 KiB was exceeded", str(e.exception))

    async def test_write_text_file_zero_length(self) -> None:
        await self.env.write_file("zero_w.file", "")
        self.assertEqual(await self.env.read_file("zero_w.file", text=True), "")

    async def test_write_text_file_space(self) -> None:
        await self.env.write_file("file with space.file", "to the moon")
        self.assertEqual(await self.env.read_file("file with space.file", text=True), "to the moon")

    async def test_write_text_file_is_directory(self) -> None:
        d = "/tmp/" + marker("write_text_dir")
        await self.env.write_file(d + "/file", "unused")
        with self.assertRaises(IsADirectoryError) as e:
            await self.env.write_file(d, "content cannot go in a directory")
        self.assertIn("directory", str(e.exception))
        await self.rm(d)

    async def test_write_text_file_without_permissions(self) -> None:
        env = await self.nobody()
        await env.write_file("ro_text.file", "impervious #content")
        await env.exec(["chmod", "-w", "ro_text.file"])
        with self.assertRaises(PermissionError) as e:
            await env.write_file("ro_text.file", "this won't stick")
        self.assertIn("ro_text.file", str(e.exception))
        self.assertEqual(await env.read_file("ro_text.file"), "impervious #content")

    async def test_write_text_file_exists(self) -> None:
        await self.env.write_file("exists.file", "original")
        await self.env.write_file("exists.file", "altered content")
        self.assertEqual(await self.env.read_file("exists.file"), "altered content")

    async def test_write_binary_file_zero_length(self) -> None:
        await self.env.write_file("zero_b.file", b"")
        got = await self.env.read_file("zero_b.file", text=False)
        self.assertIsInstance(got, bytes)
        self.assertEqual(got, b"")

    async def test_write_binary_file_space(self) -> None:
        await self.env.write_file("bin with space.file", b"\xc3\x28")
        self.assertEqual(await self.env.read_file("bin with space.file", text=False), b"\xc3\x28")

    async def test_write_binary_file_is_directory(self) -> None:
        d = "/tmp/" + marker("write_bin_dir")
        await self.env.write_file(d + "/file", "unused")
        with self.assertRaises(IsADirectoryError) as e:
            await self.env.write_file(d, b"\xc3\x28")
        self.assertIn("directory", str(e.exception))
        await self.rm(d)

    async def test_write_binary_file_without_permissions(self) -> None:
        env = await self.nobody()
        await env.write_file("ro_bin.file", b"\xc3\x28")
        await env.exec(["chmod", "-w", "ro_bin.file"])
        with self.assertRaises(PermissionError) as e:
            await env.write_file("ro_bin.file", b"\xc3\x29")
        self.assertIn("ro_bin.file", str(e.exception))

    async def test_write_binary_file_exists(self) -> None:
        await self.env.write_file("exists_b.file", b"\xc3\x28")
        await self.env.write_file("exists_b.file", b"\xc3\x29")
        self.assertEqual(await self.env.read_file("exists_b.file", text=False), b"\xc3\x29")

    # --- exec

    async def test_exec_output(self) -> None:
        self.assertEqual((await self.env.exec(["sh", "-c", "echo foo; echo bar"])).stdout, "foo\nbar\n")

    async def test_exec_stderr(self) -> None:
        r = await self.env.exec(["sh", "-c", "echo boof; echo baz >&2"])
        self.assertEqual((r.stdout, r.stderr), ("boof\n", "baz\n"))

    UTF8 = "café résumé €100 中文 😀"
    OCTAL = "".join(f"\\{b:03o}" for b in UTF8.encode("utf-8"))

    async def test_exec_output_utf(self) -> None:
        r = await self.env.exec(["sh", "-c", f"printf '{self.OCTAL}'"])
        self.assertEqual(r.stdout, self.UTF8)

    async def test_exec_stderr_utf(self) -> None:
        r = await self.env.exec(["sh", "-c", f"printf '{self.OCTAL}' >&2"])
        self.assertEqual(r.stderr, self.UTF8)

    async def test_exec_returncode(self) -> None:
        r = await self.env.exec(["sh", "-c", "echo foo; exit 70"])
        self.assertEqual((r.returncode, r.success), (70, False))

    async def test_exec_timeout(self) -> None:
        with self.assertRaises(TimeoutError):
            await self.env.exec(["sleep", "4"], timeout=2)

    async def test_exec_timeout_not_raised_on_fast_signal_death(self) -> None:
        r = await self.env.exec(["sh", "-c", "kill -TERM $$"], timeout=30)
        self.assertEqual(r.returncode, 143)

    async def test_exec_exit_124_is_not_a_timeout(self) -> None:
        # Only relayd's framework_timeout is a timeout: a command's own 124
        # or a kill it suffers is its exit status, whatever the timeout.
        self.assertEqual((await self.env.exec(["sh", "-c", "exit 124"], timeout=30)).returncode, 124)
        self.assertEqual((await self.env.exec(["sh", "-c", "kill -KILL $$"], timeout=1)).returncode, 137)

    async def test_exec_timeout_kills_process(self) -> None:
        m = marker("timeout_test")
        with self.assertRaises(TimeoutError):
            await self.env.exec(["sh", "-c", f"echo '{m}' > /dev/null && sleep 30; :"], timeout=2)
        await self.gone(m)  # no waiting: relayd settled before it replied

    async def test_exec_timeout_kills_child_processes(self) -> None:
        parent, child, escapee = marker("timeout_parent"), marker("timeout_child"), marker("timeout_setsid")
        with self.assertRaises(TimeoutError):
            await self.env.exec(["sh", "-c", f"sh -c 'sleep 30; : {child}' & setsid sh -c 'sleep 30; : {escapee}' & "
                                 f"sleep 30; : {parent}"], timeout=2)
        for m in (parent, child, escapee):
            await self.gone(m)

    async def test_exec_permission_error(self) -> None:
        with self.assertRaises(PermissionError):
            await self.env.exec(["/etc/passwd"])

    async def test_exec_env_vars(self) -> None:
        r = await self.env.exec(cmd=["sh", "-c", "echo $CUSTOM_ENV_VAR_1; echo $CUSTOM_ENV_VAR_2"],
                                env={"CUSTOM_ENV_VAR_1": "chonko zamboodle", "CUSTOM_ENV_VAR_2": "zeddle_zom"})
        self.assertEqual(r.stdout, "chonko zamboodle\nzeddle_zom\n")

    async def test_exec_input_text(self) -> None:
        self.assertEqual((await self.env.exec(["cat"], input="hello\nworld\n")).stdout, "hello\nworld\n")
        r = await self.env.exec(["cat"], input="")
        self.assertEqual((r.success, r.stdout), (True, ""))

    async def test_exec_input_shell_special(self) -> None:
        content = "$HOME `whoami` 'single' \"double\" \\backslash\nnewline\n"
        self.assertEqual((await self.env.exec(["cat"], input=content)).stdout, content)

    async def test_exec_input_binary(self) -> None:
        payload = b"\xc3\x28\x00\xff\x01\x02bytes"
        r = await self.env.exec(["sh", "-c", "cat > input_binary.file"], input=payload)
        self.assertTrue(r.success, r.stderr)
        self.assertEqual(await self.env.read_file("input_binary.file", text=False), payload)

    async def test_exec_input_large(self) -> None:
        r = await self.env.exec(["wc", "-c"], input="a" * (50 * MiB))
        self.assertTrue(r.success, r.stderr)
        self.assertEqual(int(r.stdout.split()[0]), 50 * MiB)

    async def test_exec_large_command(self) -> None:
        chunk = "x" * (64 * 1024)
        r = await self.env.exec(["printf", "%s", *([chunk] * 16)])
        self.assertTrue(r.success, r.stderr)
        self.assertEqual(r.stdout, chunk * 16)

    async def test_exec_as_user(self) -> None:
        self.assertEqual((await self.env.exec(["whoami"], user="root")).stdout.strip(), "root")
        self.assertEqual((await self.env.exec(["whoami"], user="nobody")).stdout.strip(), "nobody")
        self.assertEqual((await self.env.exec(["id", "-u"], user="65534")).stdout.strip(), "65534")

    async def test_exec_as_nonexistent_user(self) -> None:
        r = await self.env.exec(["whoami"], user="nonexistent")
        self.assertFalse(r.success)
        self.assertIn("nonexistent", r.stdout + r.stderr)

    async def test_cwd_unspecified(self) -> None:
        await self.env.write_file("cwd_unspecified.file", "ls me plz")
        self.assertIn("cwd_unspecified.file", (await self.env.exec(["ls", "-1"])).stdout)

    async def test_cwd_custom(self) -> None:
        self.assertIn("env", (await self.env.exec(["ls"], cwd="/usr/bin")).stdout.split())

    async def test_cwd_relative(self) -> None:
        await self.env.exec(["mkdir", "-p", "subdir"])
        await self.env.write_file("subdir/cwd_relative.file", "ls me plz")
        self.assertIn("cwd_relative.file", (await self.env.exec(["ls"], cwd="subdir")).stdout)

    async def test_cwd_absolute(self) -> None:
        d = "/tmp/" + marker("cwd_absolute")
        await self.env.exec(["mkdir", d])
        await self.env.write_file(d + "/cwd_absolute.file", "ls me plz")
        self.assertIn("cwd_absolute.file", (await self.env.exec(["ls"], cwd=d)).stdout)
        await self.rm(d)

    # --- output limits (the exec contract, beyond the self-check)

    async def test_exec_output_limit(self) -> None:
        with iu.override_max_exec_output_size(1024):
            with self.assertRaises(iu.OutputLimitExceededError) as e:
                await self.env.exec(["sh", "-c", "head -c 2048 /dev/zero | tr '\\0' a"])
            self.assertIn("limit of 1 KiB was exceeded", str(e.exception))
            with self.assertRaises(iu.OutputLimitExceededError):
                await self.env.exec(["sh", "-c", "head -c 2048 /dev/zero | tr '\\0' a >&2"])
            self.assertEqual(len((await self.env.exec(["head", "-c", "1024", "/etc/passwd"])).stdout) <= 1024, True)

    async def test_exec_output_limit_relayd_truncated(self) -> None:
        # Past relayd's --max-stdout-bytes (11 MiB) it reports stdout_truncated.
        with iu.override_max_exec_output_size(64 * MiB):
            with self.assertRaises(iu.OutputLimitExceededError):
                await self.env.exec(["sh", "-c", "head -c 12582912 /dev/zero | tr '\\0' a"])

    async def test_default_limit_fits(self) -> None:
        r = await self.env.exec(["sh", "-c", "head -c 10485760 /dev/zero | tr '\\0' a"])
        self.assertEqual(len(r.stdout), 10 * MiB)

    async def test_exec_concurrent(self) -> None:
        # inspect may call exec on one sandbox at once; they run one at a time.
        rs = await asyncio.gather(*[self.env.exec(["sh", "-c", f"sleep 0.1; echo {i}"]) for i in range(4)])
        self.assertEqual([r.stdout for r in rs], ["0\n", "1\n", "2\n", "3\n"])

    async def test_boundary_settles_leftovers(self) -> None:
        m = marker("leftover")
        await self.env.exec(["sh", "-c", f"setsid sh -c 'sleep 60; : {m}' >/dev/null 2>&1 &"])
        v = await self.env.boundary()
        self.assertGreaterEqual(len(v.settled), 1, v)
        await self.gone(m)


class LocalSelfCheck(SelfCheck, unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.d = Relayd(*RELAYD_ARGS)
        # A container's workspace is open to its users; the fixture's is 0700 under mkdtemp.
        os.chmod(cls.d.dir, 0o711)
        os.chmod(cls.d.workspace, 0o755)
        cls.config = {"command": [relayd_binary(), "bridge", "--socket", cls.d.socket], "token": cls.d.token}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.d.close()


@unittest.skipUnless(os.environ.get("RELAYD_INSPECT_CONTAINER"), "RELAYD_INSPECT_CONTAINER names no container")
class DockerSelfCheck(SelfCheck, unittest.IsolatedAsyncioTestCase):
    config = None  # the adapter reads RELAYD_INSPECT_CONTAINER and RELAYD_TOKEN_FILE

    async def sample(self, **extra: Any) -> Any:
        if extra:
            self.config = {}
            try:
                return await super().sample(**extra)
            finally:
                self.config = None
        return await super().sample()


class Adapter(unittest.TestCase):
    def test_bridge_argv(self) -> None:
        self.assertEqual(ri.bridge_argv({"container": "trial-1"}), ["docker", "exec", "-i", "trial-1", "relayd", "bridge"])
        self.assertEqual(ri.bridge_argv({"compose_service": "default", "compose_project": "p1"}),
                         ["docker", "compose", "-p", "p1", "exec", "-T", "default", "relayd", "bridge"])
        self.assertEqual(ri.bridge_argv({"pod": "agent-0", "kube_container": "task", "namespace": "evals",
                                         "context": "gke", "socket": "/run/relayd/s"}),
                         ["kubectl", "--context", "gke", "-n", "evals", "exec", "-i", "agent-0", "-c", "task", "--",
                          "relayd", "bridge", "--socket", "/run/relayd/s"])
        self.assertEqual(ri.sandbox_config("trial-2"), {"container": "trial-2", **ri.sandbox_config(None)})
        with self.assertRaises(ValueError):
            ri.sandbox_config({"containr": "x"})
        # inspect's SandboxEnvironmentSpec passes a dict config through config_deserialize.
        cfg = {"container": "trial-1", "token_file": "/run/relayd/token"}
        self.assertEqual(ri.RelaydSandboxEnvironment.config_deserialize(cfg), cfg)
        with self.assertRaises(ValueError):
            ri.RelaydSandboxEnvironment.config_deserialize({"containr": "x"})

    def test_registered(self) -> None:
        self.assertIs(iu.REGISTRY["relayd"], ri.RelaydSandboxEnvironment)
        with open(os.path.join(REPO, "clients", "python", "pyproject.toml")) as f:
            self.assertIn('[project.entry-points.inspect_ai]\nrelayd = "relayd_client.inspect"', f.read())

    def test_missing_framework_is_said(self) -> None:
        import subprocess
        src = os.path.dirname(os.path.dirname(os.path.abspath(ri.__file__)))
        r = subprocess.run([sys.executable, "-c", "import relayd_client; import relayd_client.inspect"],
                           env={"PYTHONPATH": src, "PATH": os.environ.get("PATH", "")}, capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("pip install inspect-ai", r.stderr)

    def test_readme_snippet(self) -> None:
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("### With inspect_ai"):readme.index("## A netcat session")]
        code = re.search(r"```python\n(.*?)```", section, re.S)
        assert code is not None, "no python snippet in the README's inspect_ai section"
        scope: Dict[str, Any] = {}
        exec(code.group(1), scope)
        kind, config = scope["sandbox"]
        self.assertIs(iu.REGISTRY[kind], ri.RelaydSandboxEnvironment)
        cfg = ri.sandbox_config(config)
        self.assertEqual(ri.bridge_argv(cfg), ["docker", "exec", "-i", "trial-1", "relayd", "bridge"])
        self.assertEqual(cfg["token_file"], "/run/relayd/token")
        self.assertTrue(callable(ri.RelaydSandboxEnvironment.boundary))


if __name__ == "__main__":
    unittest.main()
