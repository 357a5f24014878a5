"""What the harness's Python tests share: named checks, a summary, and polling."""
import time

FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def summary(passed="all checks passed"):
    """Prints the outcome; the exit code (1 when a check failed)."""
    if FAILED:
        print(f"{len(FAILED)} check(s) failed", flush=True)
        return 1
    print(passed, flush=True)
    return 0


def wait_for(pred, seconds, every=0.1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(every)
    return pred()
