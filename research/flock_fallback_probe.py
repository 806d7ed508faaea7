"""What filelock does on a file system without `flock` (issue O, session 48): `fcntl.flock` is made to fail with ENOSYS
(as on Lustre mounted without -o flock) in every process; a holder takes a FileLock and sleeps, a second process tries
to take it while the holder lives, then again after the holder is killed with SIGKILL.

Decided: `files.os_file_lock` refuses such a file system (the behaviour below differs between filelock's versions).
Run with the filelock under test first on the path, e.g.
    pip download --no-deps filelock==3.24.0 -d /tmp/fl/v3.24.0 && (cd /tmp/fl/v3.24.0 && unzip -q *.whl)
    PYTHONPATH=/tmp/fl/v3.24.0 python research/flock_fallback_probe.py
"""
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

NO_FLOCK = ("import errno, fcntl, os, warnings\nwarnings.simplefilter('ignore')\n"
            "def refused(fd, op): raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))\nfcntl.flock = refused\n"
            "from filelock import FileLock, Timeout\n")
HOLD = NO_FLOCK + "import sys, time\nlock = FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)\n"
TRY = NO_FLOCK + ("import sys\nlock = FileLock(sys.argv[1], timeout=0)\n"
                  "try: lock.acquire(); print('taken'); lock.release()\n"
                  "except Timeout: print('refused')\n"
                  "except Exception as e: print(type(e).__name__ + ': ' + str(e))\n")


def attempt(path) -> str:
    return subprocess.run([sys.executable, "-c", TRY, str(path)], capture_output=True, text=True, timeout=60).stdout.strip()


if __name__ == "__main__":
    import filelock
    path = Path(tempfile.mkdtemp()) / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = holder.stdout.readline().strip() or holder.stderr.read().strip().splitlines()[-1]
    live = attempt(path) if first == "held" else "-"
    holder.kill(); holder.wait(); time.sleep(0.5)
    print(f"filelock {filelock.__version__}: holder: {first}; a second process while it lives: {live}; "
          f"after it is killed: {attempt(path)}")
