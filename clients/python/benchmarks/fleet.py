"""Many trials per controller, in Python (issue 20): N dial-out relayds
started at once against one AsyncListener, one execute of /bin/true and a
verify each. Prints the trials lost, the time and the controller's peak
RSS. A benchmark, not a test:

    python3 clients/python/benchmarks/fleet.py bin/relayd 500 1000 2000

One thread serves every trial: the blocking Listener needs a thread per
trial, and 2,000 of them beside 2,000 relayds and their shims run this
machine out of pids (pid_max 32,768), which relayd reports as 111."""
import asyncio
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from relayd_client import AsyncListener

async def run(n, relayd):
    base = tempfile.mkdtemp(prefix="apyfleet-")
    lost = []
    async with AsyncListener(("127.0.0.1", 0), max_pending=4096) as lst:
        host, port = lst.address
        toks = []
        for i in range(n):
            d = os.path.join(base, str(i)); os.makedirs(os.path.join(d, "ws"))
            t = secrets.token_hex(16); toks.append(t)
            with open(os.path.join(d, "token"), "w") as f: f.write(t)
            os.chmod(os.path.join(d, "token"), 0o600)
        began = time.monotonic()
        procs = [subprocess.Popen([relayd, "--connect", f"{host}:{port}", "--token-file", os.path.join(base, str(i), "token"),
                "--workspace", os.path.join(base, str(i), "ws"), "--state-dir", os.path.join(base, str(i), "state"),
                "--connect-timeout", "120s", "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]
        async def trial(i):
            try:
                c = await lst.accept(toks[i], timeout=180)
                async with c:
                    x = await c.execute("/bin/true")
                    assert x.exit_code == 0, (x.exit_code, x.raw.get("detail"))
                    await c.verify()
            except Exception as e:
                lost.append((i, repr(e)))
        await asyncio.gather(*(trial(i) for i in range(n)))
        took = time.monotonic() - began
        for i, p in enumerate(procs):
            if p.wait(60) != 0: lost.append((i, f"relayd exit {p.returncode}"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"python async fleet of {n}: {len(set(i for i,_ in lost))} lost, {took:.1f} s, controller peak RSS {rss:.0f} MiB; {lost[:2]}")
    shutil.rmtree(base, ignore_errors=True)

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
for n in map(int, sys.argv[2:]): asyncio.run(run(n, sys.argv[1]))
