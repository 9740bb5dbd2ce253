"""relayd_client.harbor, Harbor's Docker environment through relayd, loaded
the way Harbor loads an environment named by import path, against a real
relayd. Harbor cannot be installed here: tests/stand_ins/harbor is a
stand-in for its base classes, result type and the calls its Verifier
makes, written here (its doc says which of Harbor's files it mirrors and
what Harbor's own Docker exec does, which these tests hold the adapter to).

LocalHarborTest reaches a relayd of its own through ``relayd bridge
--socket`` (make pytest, no Docker). DockerHarborTest runs the same tests
through ``docker exec -i C relayd bridge`` against the container
$RELAYD_HARBOR_CONTAINER with the token in $RELAYD_TOKEN_FILE
(e2e/docker_harbor_test.go starts one); without them it is skipped."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, List
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))

import relayd_client.harbor as rh  # noqa: E402
from relayd_fixture import NoLeaks, Relayd, relayd_binary, subject_pythonpath, wait_for  # noqa: E402

IMPORT_PATH = "relayd_client.harbor:RelaydDockerEnvironment"


class HarborCases(NoLeaks):
    """The tests, for a channel given by bridge() and token_kwargs()."""

    def bridge(self) -> List[str]:
        raise NotImplementedError

    def token_kwargs(self) -> dict:
        raise NotImplementedError

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.local = tempfile.mkdtemp(prefix="relayd-harbor-local-")
        self.addCleanup(shutil.rmtree, self.local, True)
        # A path in the environment (the host's /tmp locally, the container's in Docker).
        self.remote = "/tmp/relayd-harbor-test-" + secrets.token_hex(6)

    def env(self, **kwargs: Any) -> Any:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.task.config import EnvironmentConfig

        kwargs.setdefault("task_env_config", EnvironmentConfig())
        kwargs.setdefault("relayd_bridge", self.bridge())
        return EnvironmentFactory.create_environment_from_import_path(
            IMPORT_PATH, environment_dir=Path(self.local), environment_name="task", session_id="task__1",
            trial_paths=None, logger=None, **{**self.token_kwargs(), **kwargs})

    def token_path(self) -> str:
        """Where relayd's token file is, as the environment's processes see it."""
        raise NotImplementedError

    def run_async(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def alive(self, e: Any, pid: int) -> bool:
        r = await e.exec(f"kill -0 {pid}")
        return bool(r.return_code == 0)

    async def pid(self, e: Any, path: str) -> int:
        for _ in range(200):
            r = await e.exec(f"cat {path}")
            if r.return_code == 0 and r.stdout and r.stdout.strip():
                return int(r.stdout.split()[0])
            await asyncio.sleep(0.05)
        raise AssertionError(f"no pid in {path}")

    def test_loaded_by_import_path_reusing_docker_environment(self) -> None:
        from harbor.environments.docker.docker import DockerEnvironment

        async def go() -> None:
            e = self.env()
            self.assertIsInstance(e, DockerEnvironment)
            self.assertEqual(e._docker_compose_paths[-1], rh.COMPOSE_OVERLAY)
            self.assertEqual([p.name for p in e._docker_compose_paths],
                             ["docker-compose-build.yaml", rh.COMPOSE_OVERLAY.name])
            await e.start(force_build=False)  # Harbor's start: build, down, up, the mounts opened through exec
            await e.stop(delete=True)
            self.assertEqual(e.compose_calls, [["build"], ["down", "--remove-orphans"], ["up", "--detach", "--wait"],
                                               ["down"]])
        self.run_async(go())

    def test_exec_streams_exit_code_cwd_env_user(self) -> None:
        async def go() -> None:
            e = self.env(persistent_env={"P": "persistent", "Q": "q"})
            r = await e.exec("echo out; echo err >&2; exit 3")
            self.assertEqual((r.stdout, r.stderr, r.return_code), ("out\nerr\n", None, 3))
            r = await e.exec('pwd; echo "$P $Q $FOO"', cwd="/tmp", env={"FOO": "bar", "Q": "exec"})
            self.assertEqual((r.stdout, r.return_code), ("/tmp\npersistent exec bar\n", 0))
            # cwd /: the local relayd's workspace is its test directory's, mode 0700.
            r = await e.exec("id -un", cwd="/", user="nobody")
            self.assertEqual((r.stdout, r.stderr, r.return_code), ("nobody\n", None, 0))
            e.default_user = "nobody"  # Harbor sets it to the task's agent user
            self.assertEqual((await e.exec("id -u", cwd="/")).stdout, "65534\n")
            self.assertEqual((await e.exec("id -u", cwd="/", user="root")).stdout, "0\n")
            self.assertEqual((await e.exec("id -u", cwd="/", user=65534)).stdout, "65534\n")  # a uid, as Harbor allows
        self.run_async(go())

    def test_timeout_is_a_deadline_that_kills_escapees(self) -> None:
        """Past timeout_sec, what Harbor's Docker exec raises (its
        _run_docker_compose_command: RuntimeError, "Command timed out after N
        seconds"), and relayd has killed the command's whole scope."""
        async def go() -> None:
            e = self.env()
            pidfile = self.remote + ".escapee"
            with self.assertRaises(RuntimeError) as cm:
                await e.exec(f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & echo started; sleep 300",
                             timeout_sec=1)
            self.assertEqual(str(cm.exception), "Command timed out after 1 seconds")
            self.assertFalse(await self.alive(e, await self.pid(e, pidfile)), "the setsid escapee outlived the deadline")
            await e.exec(f"rm -f {pidfile}")
        self.run_async(go())

    def test_exec_runs_in_the_task_workdir(self) -> None:
        """Harbor's exec runs in ``cwd or task_env_config.workdir``."""
        from harbor.models.task.config import EnvironmentConfig

        async def go() -> None:
            workdir = self.remote + "/app"
            await self.env().exec(f"mkdir -p {workdir}", cwd="/")
            e = self.env(task_env_config=EnvironmentConfig(workdir=workdir))
            self.assertEqual((await e.exec("pwd")).stdout, workdir + "\n")
            self.assertEqual((await e.exec("pwd", cwd="/tmp")).stdout, "/tmp\n")
            await e.exec(f"rm -rf {self.remote}", cwd="/")
        self.run_async(go())

    def test_exec_merges_stderr_into_stdout_as_harbor_does(self) -> None:
        """Harbor's Docker exec reads one stream (stderr=STDOUT): stdout holds
        both in the order written, stderr is None, and no output is None.
        relayd_merge_stderr=False keeps them apart."""
        async def go() -> None:
            e = self.env()
            r = await e.exec("echo one; echo two >&2; echo three; ls /nonexistent-relayd-harbor 2>&1 >/dev/null | wc -l")
            self.assertEqual((r.stdout, r.stderr, r.return_code), ("one\ntwo\nthree\n1\n", None, 0))
            r = await e.exec("true")
            self.assertEqual((r.stdout, r.stderr, r.return_code), (None, None, 0))
            r = await self.env(relayd_merge_stderr="false").exec("echo out; echo err >&2")
            self.assertEqual((r.stdout, r.stderr, r.return_code), ("out\n", "err\n", 0))
        self.run_async(go())

    def test_exec_numeric_uid_without_passwd_entry(self) -> None:
        """exec(user=UID) for a uid the container's passwd lacks: docker exec -u
        takes it (the root group, HOME=/), and so does relayd (protocol 4.6
        Users). Needs a relayd with numeric uids (branch signals)."""
        import pwd

        uid = 23456
        with self.assertRaises(KeyError):
            pwd.getpwuid(uid)  # locally; the task image has no such user either

        async def go() -> None:
            e = self.env()
            r = await e.exec('id -u; id -g; echo "$HOME"', cwd="/", user=uid)
            self.assertEqual((r.stdout, r.return_code), (f"{uid}\n0\n/\n", 0))
        self.run_async(go())

    def test_download_is_the_trial_users_not_roots(self) -> None:
        """Issue 28: the agent (the task's agent user, here nobody) plants a
        symlink to relayd's token file where Harbor downloads from. A
        download reads with the trial's user's rights, during the agent
        phase and after it (Harbor downloads artifacts once the phase's
        with_default_user has ended), so the token never reaches the host."""
        async def go() -> None:
            e = self.env()
            leak = f"/tmp/relayd-harbor-leak-{secrets.token_hex(6)}"
            try:
                with e.with_default_user("nobody"):  # Harbor's agent phase
                    r = await e.exec(f"ln -s {self.token_path()} {leak}", cwd="/")
                    self.assertEqual(r.return_code, 0, r.stdout)
                    with self.assertRaises(Exception):
                        await e.download_file(leak, Path(self.local, "during", "leak"))
                with self.assertRaises(Exception):  # SingleStepTrial._collect_artifacts
                    await e.download_file(leak, Path(self.local, "after", "leak"))
            finally:
                await e.exec(f"rm -f {leak}", cwd="/", user="root")
            token = self.read_token()
            for f in Path(self.local).rglob("*"):
                if f.is_file():
                    self.assertNotIn(token, f.read_text(errors="replace"), f"the token reached the host in {f}")
        self.run_async(go())

    def read_token(self) -> str:
        raise NotImplementedError

    def test_cancelled_exec_is_settled(self) -> None:
        """Harbor ends an agent with asyncio.wait_for: the cancelled exec's
        connection closes, and relayd settles what it ran."""
        async def go() -> None:
            e = self.env()
            pidfile = self.remote + ".cancelled"
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(e.exec(f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & sleep 300"), 2)
            pid = await self.pid(e, pidfile)
            for _ in range(200):
                if not await self.alive(e, pid):
                    break
                await asyncio.sleep(0.05)
            self.assertFalse(await self.alive(e, pid), "a cancelled exec's escapee runs on")
            await e.exec(f"rm -f {pidfile}")
        self.run_async(go())

    def test_file_round_trip(self) -> None:
        async def go() -> None:
            e = self.env()
            src = Path(self.local, "in.sh")
            src.write_bytes(b"#!/bin/sh\necho hi\n" + bytes(range(256)) * 2000)
            src.chmod(0o755)
            await e.upload_file(src, self.remote + "/sub/run.sh")
            r = await e.exec(f"stat -c %a {self.remote}/sub/run.sh; head -2 {self.remote}/sub/run.sh")
            self.assertEqual(r.stdout, "755\n#!/bin/sh\necho hi\n")
            await e.download_file(self.remote + "/sub/run.sh", Path(self.local, "back", "run.sh"))
            self.assertEqual(Path(self.local, "back", "run.sh").read_bytes(), src.read_bytes())
            await e.exec(f"rm -rf {self.remote}")
        self.run_async(go())

    def test_dir_round_trip(self) -> None:
        async def go() -> None:
            e = self.env()
            src = Path(self.local, "tree")
            (src / "a" / "b").mkdir(parents=True)
            (src / "top.txt").write_text("top\n")
            (src / "a" / "b" / "deep.bin").write_bytes(os.urandom(300_000))
            (src / "a" / "x.sh").write_text("#!/bin/sh\n")
            (src / "a" / "x.sh").chmod(0o755)
            await e.upload_dir(src, self.remote + "/tree")
            r = await e.exec("cat top.txt; stat -c %a a/x.sh; ls /tmp/.relayd-harbor-* 2>/dev/null | wc -l",
                             cwd=self.remote + "/tree")
            self.assertEqual(r.stdout, "top\n755\n0\n")
            out = Path(self.local, "out")
            await e.download_dir(self.remote + "/tree", out)
            for f in ("top.txt", "a/b/deep.bin", "a/x.sh"):
                self.assertEqual((out / f).read_bytes(), (src / f).read_bytes(), f)
            self.assertEqual((out / "a" / "x.sh").stat().st_mode & 0o777, 0o755)
            await e.exec(f"rm -rf {self.remote}")
        self.run_async(go())

    def test_agent_phase_ends_at_the_boundary(self) -> None:
        """What the agent left stops at end_agent_phase, but for the kept service."""
        async def go() -> None:
            e = self.env()
            beat, svc = self.remote + ".beat", self.remote + ".svc"
            await e.exec(f"nohup sh -c 'echo $$ > {beat}.pid; while :; do date > {beat}; sleep 0.1; done' >/dev/null 2>&1 &")
            await e.exec(f"nohup sh -c 'echo $$ > {svc}; exec sleep 300' >/dev/null 2>&1 &")
            loop, service = await self.pid(e, beat + ".pid"), await self.pid(e, svc)
            with self.assertRaises(ValueError):  # no survivor has that pid: nothing is settled
                await e.end_agent_phase(keep=[4194304])
            self.assertTrue(await self.alive(e, loop))
            v = await e.end_agent_phase(keep=[service])
            self.assertTrue(v.quiescent)
            self.assertIn(loop, v.settled)
            self.assertNotIn(service, v.settled)
            self.assertFalse(await self.alive(e, loop))
            self.assertTrue(await self.alive(e, service))
            await e.end_agent_phase()  # and the service, at the trial's end
            self.assertFalse(await self.alive(e, service))
            await e.exec(f"rm -f {beat} {beat}.pid {svc}")
        self.run_async(go())

    def test_verifier_upload_ends_the_agent_phase(self) -> None:
        """Harbor's Verifier uploads the tests first: that is the boundary."""
        async def go() -> None:
            e = self.env()
            tests = Path(self.local, "tests")
            tests.mkdir()
            (tests / "test.sh").write_text("exit 0\n")
            pidfile = self.remote + ".agent"
            await e.exec(f"nohup sh -c 'echo $$ > {pidfile}; exec sleep 300' >/dev/null 2>&1 &")
            agent = await self.pid(e, pidfile)
            with mock.patch.object(rh, "TESTS_DIR", self.remote + "/tests"):
                await e.upload_dir(tests, self.remote + "/tests")
            self.assertFalse(await self.alive(e, agent), "the agent's process runs into the verifier's time")
            r = await e.exec(f"sh {self.remote}/tests/test.sh")
            self.assertEqual(r.return_code, 0)
            await e.exec(f"rm -rf {self.remote} {pidfile}")
        self.run_async(go())

    def test_boundary_before_every_verifier_of_a_multi_step_task(self) -> None:
        """Harbor's multi-step trial runs a verifier after each step's agent, in
        the same environment (MultiStepTrial._run_step): the agent under its
        user, the verifier's directories emptied as root, then Verifier.verify
        (the shared tests and the step's uploaded to /tests, chmod, the test).
        Each step's verifier finds what that step's agent left gone."""
        from harbor.verifier.verifier import Verifier

        async def go() -> None:
            e = self.env()
            tests_dir, verifier_dir, state = self.remote + "/tests", self.remote + "/verifier", self.remote + "/state"
            shared, step_tests = Path(self.local, "tests"), Path(self.local, "step-tests")
            shared.mkdir()
            step_tests.mkdir()
            (shared / "test.sh").write_text(
                f"#!/bin/sh\nfor f in {state}/*.pid; do kill -0 $(cat $f) 2>/dev/null && echo alive $f; done; exit 0\n")
            (step_tests / "step.txt").write_text("step\n")
            await e.exec(f"mkdir -p {state}", cwd="/")
            with mock.patch.object(rh, "TESTS_DIR", tests_dir):
                for step in ("one", "two"):
                    with e.with_default_user(None):  # the step's agent user
                        await e.exec(f"nohup sh -c 'echo $$ > {state}/{step}.pid; exec sleep 300' >/dev/null 2>&1 &",
                                     cwd="/")
                        agent = await self.pid(e, f"{state}/{step}.pid")
                        self.assertTrue(await self.alive(e, agent))
                    await e.empty_dirs([verifier_dir], chmod=True)  # _reset_shared_step_verifier_dirs
                    await e.empty_dirs([tests_dir], chmod=False)
                    with e.with_default_user(None):  # the step's verifier user
                        r = await Verifier(e, [shared, step_tests], tests_dir=tests_dir,
                                           verifier_dir=verifier_dir).verify()
                    self.assertEqual(r.return_code, 0, r.stdout)
                    seen = (await e.exec(f"cat {verifier_dir}/test-stdout.txt", cwd="/")).stdout
                    self.assertFalse(seen, f"step {step}'s verifier ran beside the agent's leftovers: {seen}")
            await e.exec(f"rm -rf {self.remote}", cwd="/")
        self.run_async(go())

    # -- issue 41: what Harbor's own code sees --

    def free_port(self) -> int:
        """A port free on this machine's loopback (and so, very likely, in a container's own)."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    async def verifier_checks_the_agents_server(self, e: Any, agent_user: Any) -> Any:
        """A task whose verifier checks a server the agent started, in
        Harbor's order: the agent's phase (as agent_user) backgrounds
        ``python3 -m http.server`` and a loop that listens on nothing; the
        verifier's directories are reset as root; the stand-in's
        Verifier.verify uploads the tests and runs test.sh, which fetches
        from the server. Returns the test's result, the server's and the
        loop's pids."""
        from harbor.verifier.verifier import Verifier

        port = self.free_port()
        tests_dir, verifier_dir = self.remote + "/tests", self.remote + "/verifier"
        server_pid, loop_pid = self.remote + ".server", self.remote + ".loop"
        tests = Path(self.local, "tests")
        tests.mkdir()
        (tests / "test.sh").write_text(
            "#!/bin/sh\nexec python3 -c 'import urllib.request as u; "
            f"u.urlopen(\"http://127.0.0.1:{port}/\", timeout=10).read(); print(\"served\")'\n")
        with e.with_default_user(agent_user):  # the agent's phase
            r = await e.exec(f"nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & "
                             f"echo $! > {server_pid}; "
                             f"nohup sh -c 'echo $$ > {loop_pid}; while :; do sleep 0.1; done' >/dev/null 2>&1 &",
                             cwd="/")
            self.assertEqual(r.return_code, 0, f"agent as {agent_user}: {r.stdout}")
            r = await e.exec("for i in $(seq 200); do python3 -c 'import socket; "
                             f"socket.create_connection((\"127.0.0.1\", {port}), 1)' 2>/dev/null && exit 0; "
                             "sleep 0.05; done; exit 1", cwd="/")
            self.assertEqual(r.return_code, 0, "the agent's server never listened")
        server, loop = await self.pid(e, server_pid), await self.pid(e, loop_pid)
        await e.empty_dirs([verifier_dir], chmod=True)  # Harbor resets the verifier's directories as root
        with mock.patch.object(rh, "TESTS_DIR", tests_dir), e.with_default_user(None):
            result = await Verifier(e, [tests], tests_dir=tests_dir, verifier_dir=verifier_dir).verify()
        out = (await e.exec(f"cat {verifier_dir}/test-stdout.txt", cwd="/", user="root")).stdout
        return result, out, server, loop

    def test_verifier_reaches_the_server_the_agent_started(self) -> None:
        """Issue 41 (1, 2): Harbor leaves what the agent started running into
        the verifier's phase, and many tasks check a server the agent was
        asked to start. The adapter's boundary before the tests keeps what
        listens on a TCP port (whatever its user: the agent as root, then
        as nobody), settles the rest, and reports both."""
        async def go() -> None:
            for agent_user in (None, "nobody"):
                e = self.env()
                result, out, server, loop = await self.verifier_checks_the_agents_server(e, agent_user)
                self.assertEqual((result.return_code, out), (0, "served\n"),
                                 f"agent as {agent_user}: the verifier found no server")
                v = e.relayd_last_boundary
                self.assertIsNotNone(v)
                self.assertIn(server, [s.pid for s in v.survivors], f"agent as {agent_user}: {v}")
                self.assertIn(loop, v.settled or (), f"agent as {agent_user}: {v}")
                self.assertFalse(await self.alive(e, loop), "what listens on nothing met the verifier")
                self.assertTrue(await self.alive(e, server))
                v = await e.end_agent_phase()  # the trial's end
                self.assertIn(server, v.settled or ())
                await e.exec(f"rm -rf {self.remote} {self.remote}.server {self.remote}.loop", cwd="/", user="root")
                shutil.rmtree(Path(self.local, "tests"))
        self.run_async(go())

    def test_exec_output_whole_or_raises(self) -> None:
        """Issue 41 (3): Harbor returns all a command wrote. Within relayd's
        --max-stdout-bytes the adapter returns it whole; past it, it raises
        RuntimeError: never a cut returned as if it were all."""
        async def go() -> None:
            e = self.env()
            r = await e.exec("head -c 700000 /dev/zero | tr '\\0' x; echo; head -c 300000 /dev/zero | tr '\\0' y >&2")
            self.assertEqual((len(r.stdout), r.stdout.count("x"), r.stdout.count("y"), r.return_code),
                             (1000001, 700000, 300000, 0))
            try:
                r = await e.exec("head -c 3000000 /dev/zero | tr '\\0' z")
            except RuntimeError as err:
                self.assertIn("--max-stdout-bytes", str(err))
            else:
                self.assertEqual(r.stdout, "z" * 3000000)
        self.run_async(go())

    def test_upload_file_onto_a_directory_and_through_a_link(self) -> None:
        """Issue 41 (4): Harbor's upload_file is docker cp SRC main:TARGET.
        Onto a directory it writes SRC's name inside it; onto a symbolic
        link it writes where the link points (read once, a relative one
        from the link's directory: docker's client), a dangling one too;
        onto a link to a directory, into that directory."""
        async def go() -> None:
            e = self.env()
            d = self.remote
            await e.exec(f"mkdir -p {d}/dir {d}/real && echo old > {d}/real/file && ln -s real/file {d}/rel && "
                         f"ln -s {d}/real/new {d}/dangling && ln -s {d}/real {d}/todir", cwd="/")
            src = Path(self.local, "data.txt")
            src.write_text("new\n")
            src.chmod(0o640)
            await e.upload_file(src, d + "/dir")
            await e.upload_file(src, d + "/rel")
            await e.upload_file(src, d + "/dangling")
            await e.upload_file(src, d + "/todir")
            r = await e.exec(f"cd {d} && cat dir/data.txt real/file real/new real/data.txt && stat -c %a dir/data.txt "
                             "&& readlink rel dangling todir && [ -L rel ] && [ -d dir ]", cwd="/", user="root")
            self.assertEqual((r.stdout, r.return_code),
                             (f"new\nnew\nnew\nnew\n640\nreal/file\n{d}/real/new\n{d}/real\n", 0))
            await e.exec(f"rm -rf {d}", cwd="/", user="root")
        self.run_async(go())

    def test_downloads_keep_modes_as_docker_cp(self) -> None:
        """Issue 41 (4): docker cp keeps a file's and a directory's mode as
        the container has it: a 0640 file, a 0666 file, an empty 0700
        directory come back so, by download_dir and download_file."""
        async def go() -> None:
            e = self.env()
            d = self.remote + "/modes"
            r = await e.exec(f"umask 0 && mkdir -p {d}/empty && chmod 700 {d}/empty && echo a > {d}/f640 && "
                             f"chmod 640 {d}/f640 && echo b > {d}/f666 && chmod 666 {d}/f666 && chmod 750 {d}", cwd="/")
            self.assertEqual(r.return_code, 0, r.stdout)
            out = Path(self.local, "out")
            await e.download_dir(d, out)
            modes = {n: (out / n).stat().st_mode & 0o7777 for n in ("f640", "f666", "empty")}
            self.assertEqual(modes, {"f640": 0o640, "f666": 0o666, "empty": 0o700})
            for n in ("f640", "f666"):
                await e.download_file(f"{d}/{n}", Path(self.local, "one", n))
                self.assertEqual(Path(self.local, "one", n).stat().st_mode & 0o7777, int(n[1:], 8), n)
            await e.exec(f"rm -rf {self.remote}", cwd="/", user="root")
        self.run_async(go())

    def test_missing_cwd_and_unknown_user_exit_126(self) -> None:
        """Issue 41 (6): docker exec -w with no such directory, or -u with a
        user or group the container lacks, is exit 126 with the runtime's message,
        which Harbor reads as the command's output."""
        async def go() -> None:
            e = self.env()
            r = await e.exec("true", cwd=self.remote + "/missing")
            self.assertEqual(r.return_code, 126)
            self.assertIn(f'chdir to cwd ("{self.remote}/missing")', r.stdout or "")
            r = await e.exec("true", cwd="/", user="relayd-no-such-user")
            self.assertEqual(r.return_code, 126)
            self.assertIn("unable to find user relayd-no-such-user", r.stdout or "")
            r = await e.exec("true", cwd="/", user="root:relayd-no-such-group")
            self.assertEqual(r.return_code, 126)
            self.assertIn("unable to find group relayd-no-such-group", r.stdout or "")
        self.run_async(go())

    def test_failed_transfers_are_runtime_errors(self) -> None:
        """Issue 41 (6): Harbor's docker compose cp that fails raises
        RuntimeError (_run_docker_compose_command, check=True), which a
        harness catches; so do the adapter's."""
        async def go() -> None:
            e = self.env()
            with self.assertRaises(RuntimeError):
                await e.download_file(self.remote + "/missing", Path(self.local, "x"))
            with self.assertRaises(RuntimeError):
                await e.download_dir(self.remote + "/missing", Path(self.local, "y"))
            with self.assertRaises(RuntimeError):
                await e.upload_file(Path(self.local, "missing"), self.remote + "/z")
            with self.assertRaises(RuntimeError):
                await e.upload_dir(Path(self.local, "missing"), self.remote + "/w")
            self.assertFalse(Path(self.local, "x").exists())
        self.run_async(go())

    def test_failed_tests_upload_is_harbors_add_tests_dir_error(self) -> None:
        """Harbor's Verifier wraps a failed upload of the tests in
        AddTestsDirError; from Docker's environment its cause is the
        RuntimeError of docker compose cp, and so it is from the adapter's."""
        from harbor.verifier.verifier import AddTestsDirError, Verifier

        async def go() -> None:
            e = self.env()
            with mock.patch.object(rh, "TESTS_DIR", self.remote + "/tests"):
                with self.assertRaises(AddTestsDirError) as cm:
                    await Verifier(e, [Path(self.local, "no-tests")], tests_dir=self.remote + "/tests").verify()
            self.assertIsInstance(cm.exception.__cause__, RuntimeError)
        self.run_async(go())


async def subject_user_download(t: Any, e: Any, token_path: str, token: str) -> None:
    """Issue 28 under relayd --subject-user nobody, with no user named by
    Harbor (it downloads artifacts outside with_default_user): the trial's
    user is the one relayd runs subjects as, and a symlink that user
    planted to relayd's token file gets the host nothing."""
    t.assertEqual((await e.exec("id -un", cwd="/")).stdout, "nobody\n")
    leak = f"/tmp/relayd-harbor-leak-{secrets.token_hex(6)}"
    t.assertEqual((await e.exec(f"ln -s {token_path} {leak}", cwd="/")).return_code, 0)
    out = Path(t.local, "artifacts", "leak")
    try:
        with t.assertRaises(Exception):
            await e.download_file(leak, out)
    finally:
        await e.exec(f"rm -f {leak}", cwd="/")
    t.assertFalse(out.exists() and token in out.read_text(errors="replace"), "the token reached the host")


class LocalHarborTest(HarborCases, unittest.TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.d = Relayd()
        self.addCleanup(self.d.close)

    def bridge(self) -> List[str]:
        return [relayd_binary(), "bridge", "--socket", self.d.socket]

    def token_kwargs(self) -> dict:
        return {"relayd_token": self.d.token}

    def token_path(self) -> str:
        return os.path.join(self.d.dir, "token")

    def read_token(self) -> str:
        return str(self.d.token)

    def test_download_under_subject_user_is_not_roots(self) -> None:
        d = Relayd("--subject-user", "nobody")
        self.addCleanup(d.close)
        self.run_async(subject_user_download(
            self, self.env(relayd_bridge=[relayd_binary(), "bridge", "--socket", d.socket], relayd_token=d.token),
            os.path.join(d.dir, "token"), d.token))

    def test_upload_dir_under_subject_user_is_relayds(self) -> None:
        """Uploads keep relayd's rights (root), as Harbor's docker cp: the
        put and the tar that unpacks it alike, so /tests can be made."""
        d = Relayd("--subject-user", "nobody")
        self.addCleanup(d.close)
        src = Path(self.local, "tests")
        src.mkdir()
        (src / "test.sh").write_text("exit 0\n")

        async def go() -> None:
            e = self.env(relayd_bridge=[relayd_binary(), "bridge", "--socket", d.socket], relayd_token=d.token)
            await e.upload_dir(src, self.remote + "/tests")
            r = await e.exec(f"stat -c %U {self.remote}/tests/test.sh; cat {self.remote}/tests/test.sh", cwd="/")
            self.assertEqual(r.stdout, "root\nexit 0\n")
            await e.exec(f"rm -rf {self.remote}", cwd="/", user="root")
        self.run_async(go())

    def test_boundary_keeps_a_service_by_port(self) -> None:
        """end_agent_phase(keep_ports=...): the service is found by the port it listens on."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]

        async def go() -> None:
            e = self.env()
            pidfile = self.remote + ".http"
            await e.exec(f"nohup sh -c 'echo $$ > {pidfile}; exec {sys.executable} -m http.server {port} --bind 127.0.0.1'"
                         " >/dev/null 2>&1 &")
            server = await self.pid(e, pidfile)

            def listening() -> bool:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return True
                except OSError:
                    return False
            wait_for("the service to listen", listening, 20)
            v = await e.end_agent_phase(keep_ports=[port])
            self.assertNotIn(server, v.settled)
            self.assertTrue(await self.alive(e, server))
            v = await e.end_agent_phase()
            self.assertIn(server, v.settled)
            await e.exec(f"rm -f {pidfile}")
        self.run_async(go())

    def local_env(self, d: Relayd, **kwargs: Any) -> Any:
        return self.env(relayd_bridge=[relayd_binary(), "bridge", "--socket", d.socket], relayd_token=d.token, **kwargs)

    def test_boundary_before_tests_all_or_none(self) -> None:
        """relayd_boundary_before_tests="all" settles the listening server
        too; false draws no boundary (Harbor's own: the loop runs on)."""
        async def go() -> None:
            e = self.env(relayd_boundary_before_tests="all")
            result, out, server, loop = await self.verifier_checks_the_agents_server(e, None)
            self.assertNotEqual(out, "served\n")
            self.assertIn(server, e.relayd_last_boundary.settled)
            await e.exec(f"rm -rf {self.remote} {self.remote}.server {self.remote}.loop", cwd="/")
            shutil.rmtree(Path(self.local, "tests"))
            e = self.env(relayd_boundary_before_tests="false")
            result, out, server, loop = await self.verifier_checks_the_agents_server(e, None)
            self.assertEqual(out, "served\n")
            self.assertIsNone(e.relayd_last_boundary)
            self.assertTrue(await self.alive(e, loop))
            v = await e.end_agent_phase()
            self.assertEqual({server, loop} - set(v.settled or ()), set())
            await e.exec(f"rm -rf {self.remote} {self.remote}.server {self.remote}.loop", cwd="/")
        self.run_async(go())

    def test_keep_ports_keeps_only_that_with_all(self) -> None:
        """relayd_keep_ports: the task's ports, kept even by "all"."""
        async def go() -> None:
            e = self.env(relayd_boundary_before_tests="all")
            port = self.free_port()
            e._relayd_keep_ports = (port,)
            pidfile = self.remote + ".http"
            await e.exec(f"nohup sh -c 'echo $$ > {pidfile}; exec {sys.executable} -m http.server {port} "
                         "--bind 127.0.0.1' >/dev/null 2>&1 &", cwd="/")
            server = await self.pid(e, pidfile)
            r = await e.exec(f"for i in $(seq 200); do {sys.executable} -c 'import socket; socket.create_connection("
                             f"(\"127.0.0.1\", {port}), 1)' 2>/dev/null && exit 0; sleep 0.05; done; exit 1", cwd="/")
            self.assertEqual(r.return_code, 0)
            tests = Path(self.local, "t")
            tests.mkdir()
            with mock.patch.object(rh, "TESTS_DIR", self.remote + "/tests"):
                await e.upload_dir(tests, self.remote + "/tests")
            self.assertIn(server, [s.pid for s in e.relayd_last_boundary.survivors])
            self.assertEqual(self.env(relayd_keep_ports="8000, 8080")._relayd_keep_ports, (8000, 8080))
            await e.end_agent_phase()
            await e.exec(f"rm -rf {self.remote} {pidfile}", cwd="/")
        self.run_async(go())

    def test_listeners_of_nobody_without_ptrace(self) -> None:
        """Issue 41 (2), as in Docker: relayd as root without CAP_SYS_PTRACE
        (setpriv takes it out of the bounding set), the agent as nobody:
        its server is still seen listening, kept, and reached."""
        setpriv = shutil.which("setpriv")
        if os.geteuid() != 0 or setpriv is None:
            self.skipTest("needs root and setpriv")
        d = Relayd(wrap=[setpriv, "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"])
        self.addCleanup(d.close)
        with open(f"/proc/{d.proc.pid}/status", encoding="ascii") as f:
            eff = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
        self.assertFalse(eff >> 19 & 1, "relayd holds CAP_SYS_PTRACE")

        async def go() -> None:
            e = self.local_env(d)
            result, out, server, loop = await self.verifier_checks_the_agents_server(e, "nobody")
            self.assertEqual(out, "served\n", e.relayd_last_boundary)
            await e.end_agent_phase()
            await e.exec(f"rm -rf {self.remote} {self.remote}.server {self.remote}.loop", cwd="/")
        self.run_async(go())

    def test_output_whole_under_the_overlays_limits(self) -> None:
        """Issue 41 (3): a 3 MB output, under the --max-stdout-bytes and
        --max-stderr-bytes harbor-relayd.yaml gives relayd, comes back whole
        (Harbor's exec returns it whole); past relayd's default 1 MiB the
        adapter raises RuntimeError instead of returning 1,048,576 bytes."""
        line = next(x for x in rh.COMPOSE_OVERLAY.read_text().splitlines() if "relayd --listen" in x)
        words = line.split()
        flags = [w for i, w in enumerate(words) if w.startswith("--max-std") or words[i - 1].startswith("--max-std")]
        self.assertEqual(len(flags), 4, flags)
        d = Relayd(*flags)
        self.addCleanup(d.close)

        async def go() -> None:
            r = await self.local_env(d).exec("head -c 3000000 /dev/zero | tr '\\0' z; echo; echo err >&2")
            self.assertEqual((len(r.stdout), r.stdout[-5:], r.return_code), (3000005, "z\nerr\n"[-5:], 0))
            with self.assertRaises(RuntimeError) as cm:
                await self.env().exec("head -c 3000000 /dev/zero | tr '\\0' z")
            self.assertIn("--max-stdout-bytes", str(cm.exception))
        self.run_async(go())

    @unittest.skipUnless(getattr(rh, "_LINKS_KEEP", None), "needs the client's upload_dir/download_dir links= (branch trees)")
    def test_trees_keep_symbolic_links(self) -> None:
        """Issue 41 (5): docker cp copies a tree's symbolic links as they
        are, absolute ones and ones leaving the tree too, both ways."""
        async def go() -> None:
            e = self.env()
            src = Path(self.local, "venv")
            (src / "bin").mkdir(parents=True)
            os.symlink("/usr/bin/python3", src / "bin" / "python3")
            os.symlink("../../outside", src / "bin" / "out")
            await e.upload_dir(src, self.remote + "/venv")
            r = await e.exec(f"readlink {self.remote}/venv/bin/python3 {self.remote}/venv/bin/out", cwd="/")
            self.assertEqual(r.stdout, "/usr/bin/python3\n../../outside\n")
            out = Path(self.local, "back")
            await e.download_dir(self.remote + "/venv", out)
            self.assertEqual((os.readlink(out / "bin" / "python3"), os.readlink(out / "bin" / "out")),
                             ("/usr/bin/python3", "../../outside"))
            await e.exec(f"rm -rf {self.remote}", cwd="/")
        self.run_async(go())

    def test_without_harbor_a_clear_error(self) -> None:
        code = ("import relayd_client, relayd_client.harbor as h\n"
                "try:\n    h.RelaydDockerEnvironment\nexcept ImportError as e:\n    print(e)\n")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = subject_pythonpath()
        p = subprocess.run([sys.executable, "-X", "dev", "-W", "error", "-c", code], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertIn("relayd_client.harbor needs Harbor (the harbor package: pip install harbor)", p.stdout)


def readme_section() -> str:
    """README.md's "### With Harbor" section, checked to come right after
    "### A Harbor-style trial"."""
    from relayd_fixture import REPO

    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n### With Harbor\n")
    assert start >= 0, 'README.md has no "### With Harbor" section'
    before = text[:start]
    previous = before[before.rfind("\n### ") + 1:].split("\n", 1)[0]
    # Right after the Harbor-style trial (or after inspect_ai's section, placed there too).
    assert previous in ("### A Harbor-style trial", "### With inspect_ai"), \
        f'"### With Harbor" follows {previous!r}; want "### A Harbor-style trial"'
    section = text[start + 1:]
    ends = [i for i in (section.find("\n## "), section.find("\n### ", 4)) if i >= 0]
    return section[:min(ends)] if ends else section


class ReadmeHarborTest(NoLeaks, unittest.TestCase):
    """The README's harbor run line: its import path and keywords, given to
    Harbor's loader (the stand-in's), make an environment that does what
    the section says: a deadline kills a setsid escapee (and raises), and
    the verifier's upload of /tests ends what the agent left."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.d = Relayd()
        self.addCleanup(self.d.close)

    def test_with_harbor(self) -> None:
        from harbor.environments.factory import EnvironmentFactory

        section = readme_section()
        self.assertLess(len(section.encode()), 1500, "the README's Harbor section must stay under 1.5 KB")
        words = section[section.index("$ harbor run"):].split("\n\n")[0].replace("\\\n", " ").split()
        import_path = words[words.index("--environment-import-path") + 1]
        self.assertEqual(import_path, IMPORT_PATH)
        kwargs = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--environment-kwarg")
        self.assertEqual(set(kwargs), {"relayd_token_file"})
        kwargs["relayd_token_file"] = os.path.join(self.d.dir, "token")  # the fixture's token file
        tmp = tempfile.mkdtemp(prefix="relayd-harbor-readme-")
        self.addCleanup(shutil.rmtree, tmp, True)
        e = EnvironmentFactory.create_environment_from_import_path(
            import_path, environment_dir=Path(tmp), environment_name="task", session_id="task__1", trial_paths=None,
            task_env_config=None, logger=None, relayd_bridge=[relayd_binary(), "bridge", "--socket", self.d.socket],
            **kwargs)

        async def go() -> None:
            with self.assertRaises(RuntimeError):  # what Harbor's own Docker exec raises
                await e.exec(f"setsid sh -c 'echo $$ > {tmp}/escapee; exec sleep 300' & sleep 300", timeout_sec=1)
            escapee = int(Path(tmp, "escapee").read_text())
            self.assertFalse((await e.exec(f"kill -0 {escapee}")).return_code == 0)
            await e.exec(f"nohup sh -c 'echo $$ > {tmp}/agent; exec sleep 300' >/dev/null 2>&1 &")
            wait_for("the agent's pid", lambda: os.path.exists(f"{tmp}/agent") and os.path.getsize(f"{tmp}/agent") > 0)
            agent = int(Path(tmp, "agent").read_text())
            os.mkdir(f"{tmp}/tests")
            with mock.patch.object(rh, "TESTS_DIR", f"{tmp}/in-env-tests"):
                await e.upload_dir(f"{tmp}/tests", f"{tmp}/in-env-tests")
            self.assertFalse((await e.exec(f"kill -0 {agent}")).return_code == 0, "the agent's process met the verifier")
        asyncio.run(go())


@unittest.skipUnless(os.environ.get("RELAYD_HARBOR_CONTAINER") and os.environ.get("RELAYD_TOKEN_FILE"),
                     "RELAYD_HARBOR_CONTAINER and RELAYD_TOKEN_FILE unset (e2e/docker_harbor_test.go sets them)")
class DockerHarborTest(HarborCases, unittest.TestCase):
    def bridge(self) -> List[str]:
        return ["docker", "exec", "-i", os.environ["RELAYD_HARBOR_CONTAINER"], "relayd", "bridge"]

    def token_kwargs(self) -> dict:
        return {"relayd_token_file": os.environ["RELAYD_TOKEN_FILE"]}

    def token_path(self) -> str:
        return os.environ.get("RELAYD_HARBOR_TOKEN_PATH", "/run/secrets/relayd_token")

    def read_token(self) -> str:
        with open(os.environ["RELAYD_TOKEN_FILE"], encoding="utf-8") as f:
            return f.read().strip()

    def test_start_copies_relayd_and_finds_main(self) -> None:
        """Without relayd_bridge, as Harbor runs it: start copies relayd out
        of its image for the overlay, and exec finds the main container
        with docker compose ps (the stand-in answers the test's container)."""
        async def go() -> None:
            e = self.env()
            e._relayd_bridge = None
            with mock.patch.dict(os.environ, {"RELAYD_BIN": ""}):
                await e.start(force_build=False)
            binary = e._compose_task_env["RELAYD_BIN"]
            self.addCleanup(shutil.rmtree, os.path.dirname(binary), True)
            self.assertEqual(e._compose_task_env["RELAYD_TOKEN_FILE"], os.path.abspath(os.environ["RELAYD_TOKEN_FILE"]))
            up = e.compose_envs[e.compose_calls.index(["up", "--detach", "--wait"])]  # what compose up reads
            self.assertEqual((up["RELAYD_BIN"], up["RELAYD_TOKEN_FILE"]), (binary, e._compose_task_env["RELAYD_TOKEN_FILE"]))
            p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            r = await e.exec("echo through docker exec")
            self.assertEqual((r.stdout, r.return_code), ("through docker exec\n", 0))
            self.assertIn(["ps", "-q", "main"], e.compose_calls)
        self.run_async(go())


@unittest.skipUnless(os.environ.get("RELAYD_HARBOR_CONTAINER") and os.environ.get("RELAYD_HARBOR_SUBJECT_USER"),
                     "RELAYD_HARBOR_SUBJECT_USER unset (e2e/docker_harbor_test.go sets it where relayd runs subjects "
                     "as nobody)")
class DockerSubjectUserHarborTest(NoLeaks, unittest.TestCase):
    """Issue 28 in a container whose relayd runs subjects as nobody."""

    def setUp(self) -> None:
        self._leak_setup()
        self.addCleanup(self._leak_check)
        self.local = tempfile.mkdtemp(prefix="relayd-harbor-local-")
        self.addCleanup(shutil.rmtree, self.local, True)

    def test_download_under_subject_user_is_not_roots(self) -> None:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.task.config import EnvironmentConfig

        with open(os.environ["RELAYD_TOKEN_FILE"], encoding="utf-8") as f:
            token = f.read().strip()
        e = EnvironmentFactory.create_environment_from_import_path(
            IMPORT_PATH, environment_dir=Path(self.local), environment_name="task", session_id="task__1",
            trial_paths=None, task_env_config=EnvironmentConfig(), logger=None,
            relayd_bridge=["docker", "exec", "-i", os.environ["RELAYD_HARBOR_CONTAINER"], "relayd", "bridge"],
            relayd_token=token)
        asyncio.run(subject_user_download(self, e, os.environ.get("RELAYD_HARBOR_TOKEN_PATH",
                                                                  "/run/secrets/relayd_token"), token))


if __name__ == "__main__":
    unittest.main()
