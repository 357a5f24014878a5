"""Mount points the pod runners create on the host, shared by every runner on the machine.

A pod's volume is bind-mounted at its mountPath inside the pod's own mount namespace, but a
missing mount point (/var/run/secrets/c4, /etc/c4/ca, ...) is created on the host's file system,
which every test cluster on the machine shares. Linux (3.18 and later) lets a directory be removed
while it is a mount point in another mount namespace, and detaches those mounts: a cluster that
removed "its" mount points when it stopped took the token and the CA out of the running pods of
another cluster started beside it (the node plugins then read "token file ... No such file" for
the rest of their run).

So the paths are recorded in one registry per machine, every runner holds a shared lock on the
machine's users file while it runs, and only the runner that stops last (it gets the lock
exclusively) removes them. Standard library only (podexec.py imports it).
"""
import fcntl
import os

STATE_DIR_ENV = "C4_TESTENV_HOST_STATE"  # tests point it elsewhere
DEFAULT_STATE_DIR = "/run/c4-testenv"


def state_dir():
    return os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR)


def registry_path():
    return os.path.join(state_dir(), "created-paths")


def record(path):
    """Notes a path this machine's runners created (appended: one line, atomic enough)."""
    os.makedirs(state_dir(), exist_ok=True)
    with open(registry_path(), "a") as f:
        f.write(path + "\n")


def remove_recorded():
    """Removes the recorded paths, deepest first: empty folders and empty files only."""
    try:
        with open(registry_path()) as f:
            created = sorted(set(line.strip() for line in f if line.strip()),
                             key=len, reverse=True)
    except OSError:
        return
    for p in created:
        try:
            if os.path.isdir(p) and not os.path.ismount(p):
                os.rmdir(p)
            elif os.path.isfile(p) and os.path.getsize(p) == 0:
                os.remove(p)
        except OSError:
            pass
    os.remove(registry_path())


class Users:
    """A runner's place among the machine's runners: a shared lock held while it runs."""

    def __init__(self):
        os.makedirs(state_dir(), exist_ok=True)
        self.fd = os.open(os.path.join(state_dir(), "users.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def leave(self):
        """Ends this runner's use; the last runner to leave removes the recorded paths. True when
        this one did."""
        if self.fd is None:
            return False
        last = False
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            last = True
        except BlockingIOError:
            pass
        try:
            if last:
                remove_recorded()
        finally:
            os.close(self.fd)
            self.fd = None
        return last
