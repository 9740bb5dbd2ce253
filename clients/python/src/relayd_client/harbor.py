"""relayd_client.harbor: Harbor's Docker environment with its commands and
files going through relayd. A Harbor user names it by import path:

    harbor run ... --environment-import-path relayd_client.harbor:RelaydDockerEnvironment

RelaydDockerEnvironment is Harbor's own DockerEnvironment (image build,
``docker compose up``/``down``, mounts, network policy: inherited, not
copied) with relayd's compose overlay (harbor-relayd.yaml, beside this
file) added to its compose files, and with ``exec``, ``upload_file``,
``upload_dir``, ``download_file`` and ``download_dir`` sent to relayd in
the main service through ``docker exec -i MAIN relayd bridge``. Each does
what Harbor's own Docker environment does, as its callers expect:

- ``exec``: ``bash -c command`` in ``cwd`` or else the task's
  ``workdir`` (``task_env_config.workdir``; else the image's WORKDIR, as
  relayd has no --workspace here), with ``env`` merged with the trial's
  persistent env and ``user`` (or the environment's ``default_user``; a
  uid is passed as its digits, as ``docker exec -u`` takes it). stderr
  is merged into stdout, in the order written (Harbor reads ``docker
  compose exec`` as one stream), ``stderr`` is None and no output is None;
  ``relayd_merge_stderr=False`` keeps them apart. ``timeout_sec`` is
  relayd's deadline (``timeoutMs``): when it passes, relayd kills the
  command's whole scope, ``setsid`` escapees included, and ``exec`` raises
  what Harbor's raises, ``RuntimeError("Command timed out after N
  seconds")``. A cancelled ``exec`` (Harbor's ``asyncio.wait_for`` around
  the agent) closes its connection, so relayd settles what that command
  runs instead of leaving it behind. Harbor returns all a command wrote:
  the overlay gives relayd 16 MiB of stdout (and stderr) per execution,
  and past relayd's limit ``exec`` raises RuntimeError, never returning
  a cut output. A ``cwd`` that is no directory, or a ``user`` (or group) the
  container lacks, is exit 126 with the container runtime's message as
  the output, as ``docker exec`` gives.
- files: relayd's ``put``/``get`` (chunked, sha256-checked, atomic), with
  ``docker cp``'s rules: ``upload_file`` onto a directory writes the
  source's name inside it, onto a symbolic link where the link points
  (read once, as docker's client does; relayd itself follows no link a
  subject could have made on the way), with the source's mode.
  Directories are the client's ``upload_dir``/``download_dir``: one tar
  file over put/get, unpacked on the other side by relayd itself, or by
  ``tar`` where relayd serves no trees (see ``relayd_client._dirs`` for
  why not tar over stdin), symbolic links kept as they are
  (``links="keep"``). Downloads keep the modes the container has (a 0640
  file, an empty 0700 directory), as ``docker cp`` does. A failed
  transfer raises RelaydTransferError, a RuntimeError as Harbor's failed
  ``docker compose cp`` is. Downloads read with
  the trial's user's rights: ``default_user`` when Harbor set one (root
  when that is root); between phases, the last one Harbor set that a
  command ran under (it downloads artifacts after the agent's phase);
  else the user relayd runs subjects as (``--subject-user``), asked once.
  So a symlink the agent planted cannot make a download copy what only
  root may read (relayd's token) to the host. Uploads keep relayd's
  rights, as Harbor's ``docker cp``: Harbor puts files where only root
  may write (``/tests``).
- ``end_agent_phase(keep=..., keep_ports=...)``: the trial boundary
  (``verify(all=True, survivors="settle")``): every execution ends and what
  they left is settled, but for the kept pids (and the processes listening
  on ``keep_ports``), each with its descendants.
- The boundary before the tests. Harbor leaves what the agent started
  running into the verifier's phase, and many tasks check a server the
  agent was asked to start. Harbor never calls ``end_agent_phase``, so a
  boundary is drawn where a verifier begins: at its first upload of its
  tests (``upload_dir`` to ``/tests``, what Harbor's Verifier does first;
  a step of a multi-step task runs one after each agent step) whenever a
  command has run since the last boundary. By default
  (``relayd_boundary_before_tests="listeners"``) it keeps every process
  that listens on a TCP port (whatever its user), with its descendants,
  the ports of ``relayd_keep_ports``, and what an explicit
  ``end_agent_phase`` kept, and settles the rest; ``"all"`` settles all
  but those named; ``"none"`` (or false) draws none. What it kept and
  settled is logged and left in ``relayd_last_boundary``.
- The verifier's files (protocol 4.9): once the environment has started,
  ``start`` marks the task's workdir (or ``relayd_mark_paths``) and the
  verifier's directories (``relayd_protect``, default ``/tests`` and
  ``/logs/verifier``), keeping the latter's content. At the verifier's
  first upload of its tests after a command ran, whatever the agent
  changed there (a ``reward.txt`` written ahead, a ``conftest.py``
  planted) is listed in ``relayd_tampered`` (logged as a warning) and put
  back as marked, at the boundary (``files`` protect and restore) or, when
  none is due, right after it; so the verifier starts on exactly the
  files Harbor puts there. ``relayd_changes()`` lists what changed in the
  marked directories since the start; ``stop`` frees the mark. A relayd
  without marks costs a warning, nothing else.

Constructor keywords (Harbor passes ``--environment-kwarg``s through, as
strings): ``relayd_token_file`` (default ``$RELAYD_TOKEN_FILE``) or
``relayd_token``; ``relayd_bridge`` (an argv, or a string split like a
shell's, reaching ``relayd bridge``; default: ``docker exec -i MAIN relayd
bridge``); ``relayd_image`` (default ``$RELAYD_IMAGE`` or ``relayd:dev``),
from which ``start`` copies the binary that the overlay mounts, unless
``$RELAYD_BIN`` names one; ``relayd_merge_stderr`` (default true), ``relayd_boundary_before_tests``
(``listeners``, ``all`` or ``none``) and ``relayd_keep_ports`` (e.g.
``8000,8080``); ``relayd_protect`` and ``relayd_mark_paths`` (paths,
comma-separated; ``none`` for none). Harbor itself is imported
only when the class is first used (this module imports without it);
without Harbor that raises ImportError saying so. The token is never
logged or put on a command line. What a command used (protocol 4.8) is not
passed on: Harbor's ExecResult has stdout, stderr and return_code alone
(``relayd_client.Client`` returns it, and ``status`` the survivors').
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import posixpath
import secrets
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _files
from ._wire import KeepEntry
from .client import Client
from .errors import BadRequestError, ConnectionLostError, RelaydError, ReplyTimeoutError
from .results import Changes, Executed, FileEntry, Restored, Survivor, Verified

__all__ = ["RelaydDockerEnvironment", "RelaydEnvironmentMixin", "RelaydTransferError", "COMPOSE_OVERLAY",
           "TESTS_DIR", "VERIFIER_DIR", "BOUNDARY_LISTENERS", "BOUNDARY_ALL", "BOUNDARY_NONE"]

#: The compose file that puts relayd into the task's main service.
COMPOSE_OVERLAY = Path(__file__).with_name("harbor-relayd.yaml")
#: Where Harbor's Verifier uploads a task's tests before it runs them.
TESTS_DIR = "/tests"
#: Where Harbor's verifier writes its results (the reward).
VERIFIER_DIR = "/logs/verifier"

# What Harbor's Docker environment runs: bash -c COMMAND. Here bash first
# points its stderr at its stdout, then execs bash -c COMMAND, so COMMAND
# itself (its $0, its line numbers) is Harbor's and both streams are one
# pipe, in the order written.
_MERGED = ["-c", 'exec bash -c "$1" 2>&1', "bash"]

#: relayd_boundary_before_tests: keep what listens on a TCP port (with its
#: subtree) and the task's keep_ports, settle the rest (the default); settle
#: everything but keep_ports; draw no boundary (Harbor's own behaviour).
BOUNDARY_LISTENERS, BOUNDARY_ALL, BOUNDARY_NONE = "listeners", "all", "none"

# What docker compose exec prints (through runc, exit 126) where relayd has
# no output to give: a cwd that is no directory, a user the container's
# passwd lacks. Harbor reads it as the command's output.
_RUNC = "OCI runtime exec failed: exec failed: unable to start container process: "
_RUNC_CWD = _RUNC + 'chdir to cwd ("{cwd}") set in config.json failed: no such file or directory: unknown\n'
_RUNC_USER = _RUNC + "unable to find user {user}: no matching entries in passwd file: unknown\n"
_RUNC_GROUP = _RUNC + "unable to find group {group}: no matching entries in group file: unknown\n"

# upload_file's target as docker cp resolves it (its client's copyToContainer):
# a symbolic link there is read once (a relative one from its directory), and
# a directory (not through a further link) gets the source's name inside it.
_CP_TARGET = (
    't=$1; if [ -L "$t" ]; then l=$(readlink -- "$t") || exit 1; '
    'case $l in /*) t=$l;; *) t=$(dirname -- "$t")/$l;; esac; fi; '
    'if [ -d "$t" ] && [ ! -L "$t" ]; then t=${t%/}/$2; fi; printf "%s" "$t"'
)
# The modes of a downloaded tree, as docker cp keeps them: octal mode, then
# the path below the directory, NUL-ended; symbolic links left out.
_MODES = 'cd -- "$1" && find . -mindepth 1 ! -type l -printf "%m %P\\0"'

# Trees keep their symbolic links, as docker cp does (protocol 4.6, Trees,
# "links":"keep"), once the client's upload_dir/download_dir take links=.
_LINKS_KEEP: Dict[str, Any] = (
    {"links": "keep"} if "links" in inspect.signature(Client.download_dir).parameters else {})

_MISSING = (
    "relayd_client.harbor needs Harbor (the harbor package: pip install harbor), "
    "which is not installed here; relayd_client itself needs no framework"
)


class RelaydTransferError(RuntimeError, RelaydError):
    """A failed upload or download: a RuntimeError, as Harbor's docker
    compose cp failure is (what a harness's ``except RuntimeError``
    catches), and a RelaydError; ``__cause__`` is relayd's own error (or
    the local OSError)."""


class RelaydEnvironmentMixin:
    """The relayd half of RelaydDockerEnvironment, put before Harbor's
    DockerEnvironment in its bases; see the module's doc."""

    def __init__(
        self,
        *args: Any,
        relayd_token_file: Optional[str] = None,
        relayd_token: Optional[str] = None,
        relayd_bridge: Union[str, Sequence[str], None] = None,
        relayd_image: Optional[str] = None,
        relayd_boundary_before_tests: Union[bool, str] = True,
        relayd_keep_ports: Union[str, Sequence[int], None] = None,
        relayd_merge_stderr: Union[bool, str] = True,
        relayd_protect: Union[str, Sequence[str], None] = None,
        relayd_mark_paths: Union[str, Sequence[str], None] = None,
        **kwargs: Any,
    ) -> None:
        token_file = relayd_token_file or os.environ.get("RELAYD_TOKEN_FILE")
        if relayd_token is None:
            if not token_file:
                raise ValueError("relayd_client.harbor: give relayd_token_file (or set RELAYD_TOKEN_FILE): "
                                 "the file holding relayd's token, mounted as the main service's secret")
            with open(token_file, encoding="utf-8") as f:
                relayd_token = f.read().strip()
        self._relayd_token = relayd_token
        self._relayd_token_file = token_file
        self._relayd_bridge: Optional[List[str]] = (
            shlex.split(relayd_bridge) if isinstance(relayd_bridge, str) else
            None if relayd_bridge is None else list(relayd_bridge))
        self._relayd_image = relayd_image or os.environ.get("RELAYD_IMAGE") or "relayd:dev"
        self._relayd_boundary_before_tests = _boundary_mode(relayd_boundary_before_tests)
        self._relayd_keep_ports: Tuple[int, ...] = _ports(relayd_keep_ports)
        #: What the last trial boundary did (relayd's Verified: ``settled``, and the kept ``survivors``).
        self.relayd_last_boundary: Optional[Verified] = None
        self._relayd_merge_stderr = _flag(relayd_merge_stderr)
        # Whether a command ran since the last trial boundary (one is due before a verifier), and what an
        # explicit end_agent_phase kept (kept again at the boundary before the verifier that follows).
        self._relayd_ran = False
        # What the last end_agent_phase kept, as (pid, start): the boundary before the verifier keeps it too.
        self._relayd_kept: Tuple[KeepEntry, ...] = ()
        # The uids relayd runs subjects as when no user is named, and relayd's own: asked once.
        self._relayd_uids: Optional[Tuple[str, str]] = None
        # The last default_user Harbor set that an exec ran under: the trial's user between its phases.
        self._relayd_trial_user: Union[str, int, None] = None
        # The filesystem half (protocol 4.9): the verifier's directories protected before its tests, the
        # directories marked besides (None: the task's workdir), the mark's name once taken, whether a
        # command ran since the protected directories were last put back, and what was tampered then.
        self._relayd_protect: Optional[Tuple[str, ...]] = None if relayd_protect is None else _paths(relayd_protect)
        self._relayd_mark_paths: Optional[Tuple[str, ...]] = (
            None if relayd_mark_paths is None else _paths(relayd_mark_paths))
        self._relayd_mark: Optional[str] = None
        self._relayd_protect_due = False
        #: What the agent changed in the verifier's directories, found (and put back) before its tests.
        self.relayd_tampered: Tuple[FileEntry, ...] = ()
        super().__init__(*args, **kwargs)

    # -- Harbor's container management, extended --

    @property
    def _docker_compose_paths(self) -> List[Path]:
        return list(super()._docker_compose_paths) + [COMPOSE_OVERLAY]  # type: ignore[misc]

    async def start(self, force_build: bool) -> None:
        if self._relayd_bridge is None:
            self._relayd_compose_env()
        self._relayd_ran, self._relayd_kept, self._relayd_uids, self._relayd_trial_user = False, (), None, None
        await super().start(force_build)  # type: ignore[misc]
        await self._relayd_mark_task()

    async def stop(self, delete: bool) -> None:
        name, self._relayd_mark = self._relayd_mark, None
        # A mark outlives connections: its content is freed here, unless the container goes with it.
        if name is not None and not (delete and self._relayd_bridge is None):
            try:
                c = await asyncio.to_thread(Client.over_command, await self._relayd_argv(), self._relayd_token,
                                            ready_timeout=10)  # once: a relayd already gone has nothing to free
                try:
                    await asyncio.to_thread(c.unmark, name)
                finally:
                    c.close()
            except (RelaydError, OSError) as e:
                self._relayd_log(logging.WARNING, "relayd: unmark %s failed: %s", name, e)
        await super().stop(delete)  # type: ignore[misc]

    # -- the filesystem half of the boundary (protocol 4.9) --

    def _relayd_protected_dirs(self) -> Tuple[str, ...]:
        return (TESTS_DIR, VERIFIER_DIR) if self._relayd_protect is None else self._relayd_protect

    async def _relayd_mark_task(self) -> None:
        """Marks the task's directories once the environment has started:
        its workdir (or ``relayd_mark_paths``) and the verifier's
        directories, whose content is kept so that they can be put back.
        A relayd without marks gets a warning, and the trial runs as
        before."""
        protect = self._relayd_protected_dirs()
        paths = self._relayd_mark_paths
        if paths is None:
            workdir = getattr(getattr(self, "task_env_config", None), "workdir", None)
            paths = (str(workdir),) if workdir else ()
        marked = list(dict.fromkeys(paths + protect))
        if not marked:
            return
        name = "harbor-" + secrets.token_hex(8)

        def mark(c: Client) -> bool:
            if "marks" not in (c.first_ready or c.ready()).extensions:
                return False
            c.mark(name, marked, keep=list(protect) or None)
            return True

        if await self._relayd_call(mark):
            self._relayd_mark, self._relayd_protect_due, self.relayd_tampered = name, True, ()
        else:
            self._relayd_log(logging.WARNING, "relayd serves no marks (protocol 4.9): the verifier's directories "
                                              "%s are not protected; update relayd", ", ".join(protect))

    def _relayd_files_due(self) -> Optional[Dict[str, Any]]:
        """A trial boundary's files (protect, restore) when the verifier's
        directories are due to be put back: a command ran since."""
        protect = self._relayd_protected_dirs()
        if self._relayd_mark is None or not self._relayd_protect_due or not protect:
            return None
        return {"mark": self._relayd_mark, "protect": list(protect), "restore": True}

    async def _relayd_protect_now(self) -> None:
        """Puts the verifier's directories back when no boundary did (none
        was due): what changed there is listed, then restored."""
        files = self._relayd_files_due()
        if files is None:
            return
        mark, protect = str(files["mark"]), list(files["protect"])

        def look_and_restore(c: Client) -> Tuple[Tuple[FileEntry, ...], Restored]:
            ch = c.changes(mark, protect)
            return ch.all(), c.restore(mark, protect)

        tampered, restored = await self._relayd_call(look_and_restore)
        self._relayd_tampered_found(tampered, restored, None)

    def _relayd_tampered_found(self, tampered: Sequence[FileEntry], restored: Optional[Restored],
                               error: Optional[str]) -> None:
        self._relayd_protect_due = False
        self.relayd_tampered = tuple(tampered)
        if error:
            self._relayd_log(logging.WARNING, "relayd could not look at the verifier's directories: %s", error)
        if tampered:
            self._relayd_log(logging.WARNING, "the agent changed the verifier's files (put back before the tests): %s",
                             ", ".join(f"{e.change} {e.path}" for e in tampered[:20])
                             + (f" and {len(tampered) - 20} more" if len(tampered) > 20 else ""))
        if restored is not None and not restored.complete:
            raise RuntimeError(f"relayd could not put the verifier's files back ({restored.reason}): "
                               f"{', '.join(restored.not_restored)}")

    async def relayd_changes(self, paths: Union[str, Sequence[str], None] = None) -> Changes:
        """What changed in the task's marked directories since the
        environment started (``paths`` narrows it): added, modified and
        deleted entries, the agent's work included."""
        if self._relayd_mark is None:
            raise RuntimeError("relayd_client.harbor: no mark was taken (the environment is not started, "
                               "or relayd serves no marks)")
        mark = self._relayd_mark
        ch: Changes = await self._relayd_call(Client.changes, mark, paths)
        return ch

    def _relayd_log(self, level: int, msg: str, *args: Any) -> None:
        logger = getattr(self, "logger", None)
        if isinstance(logger, logging.Logger):
            logger.log(level, msg, *args)

    def _relayd_compose_env(self) -> None:
        """The variables the overlay reads: RELAYD_BIN (copied out of the
        relayd image once per image, unless given) and RELAYD_TOKEN_FILE."""
        binary = os.environ.get("RELAYD_BIN")
        if not binary:
            # Cached by the image's id, not its tag: a rebuilt relayd:dev is copied anew.
            image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", self._relayd_image], check=True,
                                      capture_output=True, text=True, timeout=60).stdout.strip()
            cache = Path(tempfile.gettempdir()) / ("relayd-harbor-" + image_id.split(":")[-1][:24])
            binary = str(cache / "relayd")
            if not os.path.exists(binary):
                cache.mkdir(exist_ok=True)
                cid = subprocess.run(["docker", "create", self._relayd_image, "/relayd"], check=True,
                                     capture_output=True, text=True, timeout=120).stdout.strip()
                try:
                    subprocess.run(["docker", "cp", cid + ":/relayd", binary + ".part"], check=True,
                                   capture_output=True, timeout=120)
                finally:
                    subprocess.run(["docker", "rm", cid], capture_output=True, timeout=60)
                os.replace(binary + ".part", binary)
        env = {"RELAYD_BIN": binary}
        if self._relayd_token_file:
            env["RELAYD_TOKEN_FILE"] = os.path.abspath(self._relayd_token_file)
        compose_env = getattr(self, "_compose_task_env", None)
        if isinstance(compose_env, dict):  # Harbor's variables for compose only
            compose_env.update(env)
        else:
            os.environ.update(env)

    # -- the channel --

    async def _relayd_argv(self) -> List[str]:
        if self._relayd_bridge is not None:
            return self._relayd_bridge
        r = await self._run_docker_compose_command(["ps", "-q", "main"])  # type: ignore[attr-defined]
        container = (r.stdout or "").strip()
        if not container:
            raise RuntimeError("relayd_client.harbor: docker compose ps names no main container: is the environment started?")
        return ["docker", "exec", "-i", container, "relayd", "bridge"]

    async def _relayd_connect(self) -> Client:
        """A connection of its own for each call (relayd runs one execution per
        connection; Harbor may run several at once). Right after ``compose up``
        relayd may not listen yet: the bridge is retried for 30 s."""
        argv = await self._relayd_argv()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            try:
                return await asyncio.to_thread(Client.over_command, argv, self._relayd_token, ready_timeout=30)
            except (ConnectionLostError, ReplyTimeoutError, OSError):  # not yet listening; a refusal is raised
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _relayd_call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(client, ...) in a thread on a new connection. Cancelled (an
        agent's timeout in Harbor), the connection is closed at once: relayd
        takes that as the controller gone and settles what the call ran."""
        c = await self._relayd_connect()
        try:
            return await asyncio.to_thread(fn, c, *args, **kwargs)
        finally:
            c.close()

    # -- BaseEnvironment, through relayd --

    async def exec(
        self,
        command: str,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        timeout_sec: Optional[float] = None,
        user: Union[str, int, None] = None,
    ) -> Any:
        default_user = getattr(self, "default_user", None)
        if default_user is not None:
            self._relayd_trial_user = default_user
        resolve = getattr(self, "_resolve_user", None)
        user = resolve(user) if resolve is not None else user
        merge = getattr(self, "_merge_env", None)
        env = merge(env) if merge is not None else env
        cwd = cwd or getattr(getattr(self, "task_env_config", None), "workdir", None) or None
        timeout_ms = None if not timeout_sec else max(1, int(round(float(timeout_sec) * 1000)))
        args = _MERGED + [command] if self._relayd_merge_stderr else ["-c", command]
        self._relayd_ran = True
        self._relayd_protect_due = self._relayd_mark is not None
        ExecResult = _harbor("harbor.environments.base").ExecResult
        try:
            r: Executed = await self._relayd_call(
                Client.execute, "bash", args, environment=env, cwd=cwd, timeout_ms=timeout_ms,
                capture_stderr=not self._relayd_merge_stderr, user=None if user is None else str(user))
        except BadRequestError as e:
            if user is not None and _unknown_user(str(e), str(user)):
                # docker exec -u with a user the container lacks: exit 126 and runc's message.
                return self._relayd_result(ExecResult, _RUNC_USER.format(user=str(user).split(":")[0]), 126)
            if user is not None and _unknown_group(str(e), str(user)):
                # docker exec -u user:group with a group the container lacks: the same, for the group.
                return self._relayd_result(ExecResult, _RUNC_GROUP.format(group=str(user).split(":", 1)[1]), 126)
            raise
        if timeout_ms is not None and r.termination == "framework_timeout" \
                and (r.duration_ms is None or r.duration_ms >= timeout_ms):
            # Harbor's Docker exec (_run_docker_compose_command) raises this past timeout_sec; a command
            # ended sooner by a trial boundary keeps its exit 124.
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        if r.stdout_truncated or r.stderr_truncated:
            # Harbor returns all a command wrote; relayd returns at most its --max-stdout-bytes
            # (harbor-relayd.yaml raises it to 16 MiB). Never a silent cut.
            raise RuntimeError(f"Command output exceeded relayd's --max-stdout-bytes/--max-stderr-bytes "
                               f"(it returned {len((r.stdout or '').encode())} bytes of stdout): not returned cut; "
                               "raise relayd's limit or write the output to a file and download it")
        if r.exit_code == 126 and not r.stdout and cwd and (r.detail or "").startswith("cwd "):
            # docker exec -w with a cwd that is no directory: exit 126 and runc's message.
            return self._relayd_result(ExecResult, _RUNC_CWD.format(cwd=cwd), 126)
        return ExecResult(stdout=r.stdout or None, stderr=None if self._relayd_merge_stderr else r.stderr or None,
                          return_code=r.exit_code)

    def _relayd_result(self, ExecResult: Any, message: str, code: int) -> Any:
        """A result whose output is the container runtime's message: in
        stdout when stderr is merged into it (as Harbor's), else in stderr."""
        if self._relayd_merge_stderr:
            return ExecResult(stdout=message, stderr=None, return_code=code)
        return ExecResult(stdout=None, stderr=message, return_code=code)

    async def upload_file(self, source_path: Union[Path, str], target_path: str) -> None:
        """docker cp's: onto a directory, into it under the source's name;
        onto a symbolic link, through it (read once, as docker's client
        does); with relayd's rights, as the daemon's."""
        user = await self._relayd_upload_user()

        def put(c: Client) -> None:
            with open(source_path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode & 0o7777
                try:
                    c.upload_file(target_path, f, mode=mode, user=user, parents=True, timeout=None)
                    return
                except BadRequestError:  # a directory or a link there (relayd neither follows nor replaces one)?
                    x = c.execute("sh", ["-c", _CP_TARGET, "sh", target_path, os.path.basename(source_path)],
                                  cwd="/", user=user, capture_stderr=True)
                    target = posixpath.normpath(x.stdout) if x.exit_code == 0 and x.stdout else target_path
                    if target == posixpath.normpath(target_path):
                        raise
                f.seek(0)
                c.upload_file(target, f, mode=mode, user=user, parents=True, timeout=None)

        await self._relayd_transfer("upload_file", source_path, target_path, put)

    async def download_file(self, source_path: str, target_path: Union[Path, str]) -> None:
        user = await self._relayd_file_user()
        target = Path(target_path)

        def get(c: Client) -> None:
            # Into a temporary file beside target, renamed over it once relayd's
            # digest (or its failed: the file changed while sent) was read:
            # nothing half-written left behind, and what was there stays.
            with _files.local_replacement(str(target)) as f:
                c.download_file_to(source_path, f, user=user)
                # The file's mode, as docker cp gives it (not the host's umask).
                x = c.execute("stat", ["-L", "-c", "%a", "--", source_path], cwd="/", user=user, capture_stderr=True)
                if x.exit_code == 0 and x.stdout.strip().isdigit():
                    os.fchmod(f.fileno(), int(x.stdout.strip(), 8) & 0o7777)

        target.parent.mkdir(parents=True, exist_ok=True)
        await self._relayd_transfer("download_file", source_path, target_path, get)

    async def upload_dir(self, source_dir: Union[Path, str], target_dir: str) -> None:
        if PurePosixPath(target_dir) == PurePosixPath(TESTS_DIR):
            if self._relayd_boundary_before_tests != BOUNDARY_NONE and self._relayd_ran:
                # A verifier begins (its first upload of tests since a command ran): the boundary, keeping
                # what an explicit end_agent_phase kept. A second upload of the same verifier finds none due.
                await self._relayd_boundary(self._relayd_kept, self._relayd_keep_ports,
                                            self._relayd_boundary_before_tests == BOUNDARY_LISTENERS, "before the tests",
                                            files=self._relayd_files_due())
            await self._relayd_protect_now()  # the verifier's directories as marked, when no boundary put them back
            self._relayd_kept = ()  # kept for this verifier only
        # With relayd's own rights throughout (the put and the mkdir and tar around it), as upload_file.
        user = await self._relayd_upload_user()
        await self._relayd_transfer("upload_dir", source_dir, target_dir, lambda c: Client.upload_dir(
            c, str(source_dir), target_dir, user=user, timeout=None, **_LINKS_KEEP))

    async def download_dir(self, source_dir: str, target_dir: Union[Path, str]) -> None:
        user = await self._relayd_file_user()

        def get(c: Client) -> None:
            Client.download_dir(c, source_dir, str(target_dir), user=user, timeout=None, **_LINKS_KEEP)
            # Modes as docker cp keeps them (the host's extraction leaves out group and others' write bits,
            # and gives directories its own): what the container has, never through a link on either side.
            # What find could list (a directory the user may not read is left out, as its members are).
            x = c.execute("sh", ["-c", _MODES, "sh", source_dir], cwd="/", user=user, capture_stderr=True)
            _chmod_tree(str(target_dir), x.stdout or "")

        await self._relayd_transfer("download_dir", source_dir, target_dir, get)

    async def _relayd_transfer(self, what: str, source: Any, target: Any, fn: Callable[[Client], None]) -> None:
        """fn on a connection of its own; relayd's errors and local OSErrors
        raised as RelaydTransferError, a RuntimeError as Harbor's are."""
        try:
            await self._relayd_call(fn)
        except (RelaydError, OSError) as e:
            if isinstance(e, RelaydTransferError):
                raise
            raise RelaydTransferError(f"{what} {source} -> {target} failed: {e}") from e

    async def _relayd_upload_user(self) -> Optional[str]:
        """Uploads keep relayd's own rights (as Harbor's docker cp, whose
        daemon writes as root): None when relayd runs subjects as itself."""
        subject, own = await self._relayd_uids_asked()
        return None if subject == own else own

    async def _relayd_file_user(self) -> Optional[str]:
        """Whose rights a download reads with: the trial's user. That is
        Harbor's default_user when it set one; between phases (Harbor
        downloads artifacts after the agent's with_default_user ended) the
        last one it set that a command ran under; else the user relayd runs
        subjects as (--subject-user, else relayd's own). None (relayd's own
        rights) when that is root or relayd's own user."""
        user: Union[str, int, None] = getattr(self, "default_user", None)
        if user is None:
            user = self._relayd_trial_user
        if user is not None and str(user) in ("root", "0"):
            return None
        subject, own = await self._relayd_uids_asked()
        if user is None:
            user = subject
        return None if str(user) == own else str(user)

    async def _relayd_uids_asked(self) -> Tuple[str, str]:
        """The uid relayd runs a subject as when no user is named, and
        relayd's own (its shim's, the subject's parent), asked once."""
        if self._relayd_uids is None:
            script = 'echo "$EUID"; while read -r k v _; do [ "$k" = Uid: ] && echo "$v"; done < /proc/$PPID/status; exit 0'
            r: Executed = await self._relayd_call(Client.execute, "bash", ["-c", script], cwd="/",
                                                  capture_stderr=True)
            uids = r.stdout.split()
            if r.exit_code != 0 or len(uids) != 2 or not all(u.isdigit() for u in uids):
                raise RuntimeError("relayd_client.harbor: could not learn which users relayd runs commands as and "
                                   f"runs as (bash exited {r.exit_code}: {(r.stderr or r.detail or r.stdout)!r})")
            self._relayd_uids = (uids[0], uids[1])
        return self._relayd_uids

    # -- the trial boundary --

    async def end_agent_phase(self, keep: Sequence[Union[int, KeepEntry]] = (),
                              keep_ports: Sequence[int] = ()) -> Verified:
        """Ends the agent phase with relayd's trial boundary: every execution
        of the environment ends, and what they left is settled, except the
        processes in ``keep`` and those listening on ``keep_ports`` (a
        service the verifier needs), and their descendants. Returns
        relayd's Verified (``settled``, ``survivors``, ``quiescent``).

        relayd keeps a process by its pid and start time: a pid in ``keep``
        is looked up among the survivors first (a status look, which ends
        nothing), and one that is no survivor raises ValueError before any
        settling; a Survivor or a ``(pid, start)`` pair is sent as it is. A
        port nothing listens on keeps nothing. What is kept (pid and start
        time) is kept by the boundary before the next verifier too."""
        return await self._relayd_boundary(keep, keep_ports, False, "end_agent_phase")

    async def _relayd_boundary(self, keep: Sequence[Union[int, KeepEntry]], keep_ports: Sequence[int],
                               listeners: bool, why: str, files: Optional[Dict[str, Any]] = None) -> Verified:
        """The trial boundary keeping ``keep``, what listens on
        ``keep_ports`` and, with ``listeners``, every survivor listening on
        any TCP port (each with its descendants); logged and kept in
        ``relayd_last_boundary``."""
        kept: List[KeepEntry] = []

        def boundary(c: Client) -> Verified:
            pids = [k for k in keep if isinstance(k, int) and not isinstance(k, bool)]
            kept[:] = [k for k in keep if isinstance(k, (Survivor, tuple))]
            if len(pids) + len(kept) != len(keep):
                raise TypeError(f"end_agent_phase: keep={list(keep)!r}: want pids, Survivors or (pid, start) pairs")
            if pids or keep_ports or listeners:
                look = c.status().survivors
                by_pid = {s.pid: s for s in look}
                missing = [p for p in pids if p not in by_pid]
                if missing:
                    raise ValueError(f"end_agent_phase: keep={missing}: no survivor has that pid; nothing was settled")
                kept.extend(by_pid[p] for p in pids)
                ports = set(keep_ports)
                kept.extend(s for s in look if (ports & set(s.listens)) or (listeners and s.listens))
            return c.verify(all=True, survivors="settle", keep=kept, files=files)

        v: Verified = await self._relayd_call(boundary)
        if files is not None and v.files is not None:
            self._relayd_tampered_found(v.tampered, v.files.restored, v.files.error)
        self._relayd_ran, self._relayd_kept = False, tuple(kept)
        self.relayd_last_boundary = v
        logger = getattr(self, "logger", None)
        if isinstance(logger, logging.Logger):
            logger.info("relayd trial boundary (%s): kept %s; settled %s", why,
                        ", ".join(f"{s.pid} {' '.join(s.argv)[:80]!r} listening on {list(s.listens)}"
                                  for s in v.survivors) or "nothing",
                        list(v.settled or ()) or "nothing")
        return v


def _boundary_mode(value: Union[bool, str]) -> str:
    """relayd_boundary_before_tests: listeners (true, the default), all, or none (false)."""
    if isinstance(value, bool):
        return BOUNDARY_LISTENERS if value else BOUNDARY_NONE
    v = value.strip().lower()
    if v in (BOUNDARY_LISTENERS, BOUNDARY_ALL, BOUNDARY_NONE):
        return v
    return BOUNDARY_LISTENERS if _flag(v) else BOUNDARY_NONE


def _ports(value: Union[str, Sequence[int], None]) -> Tuple[int, ...]:
    """relayd_keep_ports: ports as a list, or a string "8000,8080" (Harbor passes strings)."""
    if value is None:
        return ()
    items: List[Union[str, int]] = []
    if isinstance(value, str):
        items.extend(value.replace(",", " ").split())
    else:
        items.extend(value)
    ports = []
    for p in items:
        n = int(p)
        if not 0 < n < 65536:
            raise ValueError(f"relayd_keep_ports: {p!r} is no TCP port")
        ports.append(n)
    return tuple(ports)


def _paths(value: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """relayd_protect, relayd_mark_paths: paths as a list, or a string
    "/tests,/logs/verifier" (Harbor passes strings); "none" or "" is none."""
    items = value.replace(",", " ").split() if isinstance(value, str) else [str(p) for p in value]
    if [p.lower() for p in items] == ["none"]:
        return ()
    bad = [p for p in items if not p.startswith("/")]
    if bad:
        raise ValueError(f"relayd_protect / relayd_mark_paths: {bad}: want absolute paths in the environment")
    return tuple(items)


def _unknown_user(message: str, user: str) -> bool:
    """Whether relayd refused an execute for a user its system lacks
    (env.LookupUser: 'no user "NAME" on this system')."""
    return f'no user "{user.split(":")[0]}"' in message


def _unknown_group(message: str, user: str) -> bool:
    """Whether relayd refused an execute of "user:group" for a group its
    system lacks (env.LookupUser: 'no group "NAME" on this system')."""
    _, sep, group = user.partition(":")
    return bool(sep) and f'no group "{group}"' in message


def _chmod_tree(root: str, listing: str) -> None:
    """Sets the modes _MODES listed ("MODE PATH" each, NUL-ended) below
    root, deepest first (a directory's own mode may close it), on what is
    there and is no symbolic link: every directory on the way is opened
    O_NOFOLLOW, and the last name is looked at (lstat) before its chmod."""
    for entry in reversed(listing.split("\0")):
        mode, _, rel = entry.partition(" ")
        parts = rel.split("/")
        if not rel or not mode.isdigit() or rel.startswith("/") or ".." in parts or "." in parts:
            continue
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            for part in parts[:-1]:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                os.chmod(parts[-1], int(mode, 8) & 0o7777, dir_fd=fd)
        except OSError:
            pass  # gone, through a link, or closed here: left as extracted
        finally:
            os.close(fd)


def _flag(value: Union[bool, str]) -> bool:
    """A keyword's truth: Harbor's --environment-kwarg passes strings."""
    return value if isinstance(value, bool) else value.strip().lower() not in ("0", "false", "no", "off", "")


def _harbor(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{_MISSING} ({e})") from e


_classes: Dict[str, type] = {}


def __getattr__(name: str) -> Any:
    """RelaydDockerEnvironment, made on first use: Harbor is imported then."""
    if name != "RelaydDockerEnvironment":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _classes:
        base = _harbor("harbor.environments.docker.docker").DockerEnvironment
        _classes[name] = type(name, (RelaydEnvironmentMixin, base), {
            "__module__": __name__,
            "__doc__": "Harbor's DockerEnvironment with exec and files through relayd (see relayd_client.harbor).",
        })
    return _classes[name]
