"""The exec server that keeps one bubblewrap sandbox alive for a card's commands.

Self-contained: it runs as `python -I -S -c SERVER FD` inside the sandbox (the sandbox's
PID 2: bwrap's init is PID 1) and imports nothing of ours and almost nothing else, so it
starts in milliseconds. It makes itself non-dumpable first (or does not start: the
worker then gives each command its own bwrap). FD is its end of a SOCK_SEQPACKET
socket pair with the worker.

Messages are NUL-separated fields. The worker sends `r serial cwd n argv... env...` with
the output file's descriptor (and a stdin pipe's read end) attached (SCM_RIGHTS), and
`k serial signal` to signal a running command's process group. The server answers
`ready` once, then per command `e serial errno` (it could not start) or
`x serial exit-code swept` once the command exited, every other process of the sandbox
is dead (`swept` is 0 when one would not die: the worker then ends the sandbox) and the
sandbox's /tmp, /dev/shm and System V IPC are empty again, as a fresh sandbox's.
"""

from __future__ import annotations

SERVER = r"""
import os, sys, time, _socket, _thread
import ctypes  # once per sandbox: what no command may do to the server, below
# Not dumpable: a command (same user, no capabilities) can no longer ptrace the server,
# read its memory or take its socket (pidfd_getfd), so it cannot answer for it.
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
    os._exit(1)
sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, int(sys.argv[1]))
os.set_inheritable(sock.fileno(), False)
me = os.getpid()
lock = _thread.allocate_lock()
current = [b"", 0]

def others():
    alive = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            alive.append(name)
    return alive

def sweep():
    end = time.monotonic() + 2.0
    while True:
        try:
            os.kill(-1, 9)  # all but init and this server: pid 1 is never signalled
        except OSError:
            pass
        if not others():
            return 1
        if time.monotonic() > end:
            return 0
        time.sleep(0.001)

def clear(folder, device):
    # Empty a folder of this sandbox's own tmpfs; mounts in it (binds) are not touched.
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_dev != device:
                continue
            if entry.is_dir(follow_symlinks=False):
                clear(entry.path, device)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass

def fresh():
    # What the next command finds as the first found it: /tmp and /dev/shm empty, no
    # System V IPC objects (PR_SET_DUMPABLE aside, the only use of ctypes).
    for folder in ("/tmp", "/dev/shm"):
        try:
            clear(folder, os.stat(folder).st_dev)
        except OSError:
            pass
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            with open("/proc/sysvipc/" + kind, "rb") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            remove(int(row.split()[1]), 0, 0)  # IPC_RMID

def wait(serial, pid):
    status = os.waitpid(pid, 0)[1]
    with lock:
        current[0], current[1] = b"", 0
    swept = sweep()
    fresh()
    code = os.waitstatus_to_exitcode(status)
    sock.send(b"x\0" + serial + b"\0" + str(code).encode() + b"\0" + str(swept).encode())

def child(cwd, argv, env, fds):
    os.setsid()
    stdin = fds[1] if len(fds) > 1 else os.open("/dev/null", os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    for fd in set(fds) | {stdin}:
        if fd > 2:
            os.close(fd)
    os.chdir(cwd)
    path = env.get(b"PATH", os.defpath.encode())
    folders = [b""] if b"/" in argv[0] else path.split(b":")
    error = None
    for folder in folders:
        try:
            os.execve(os.path.join(folder, argv[0]) if folder else argv[0], argv, env)
        except OSError as exc:
            error = error if exc.errno == 2 and error else exc
    raise error

def start(fields, fds):
    serial, cwd, count = fields[1], fields[2], int(fields[3])
    argv = fields[4:4 + count]
    env = dict(item.split(b"=", 1) for item in fields[4 + count:])
    report, note = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report)
            child(cwd, argv, env, fds)
        except OSError as exc:
            os.write(note, str(exc.errno or 8).encode())
        except BaseException:
            os.write(note, b"8")
        os._exit(127)
    os.close(note)
    for fd in fds:
        os.close(fd)
    failed = os.read(report, 64)
    os.close(report)
    if failed:
        os.waitpid(pid, 0)
        sweep()
        sock.send(b"e\0" + serial + b"\0" + failed)
        return
    with lock:
        current[0], current[1] = serial, pid
    _thread.start_new_thread(wait, (serial, pid))

def signal(fields):
    with lock:
        if current[0] == fields[1] and current[1]:
            try:
                os.killpg(current[1], int(fields[2]))
            except OSError:
                pass

sock.send(b"ready")
while True:
    try:
        data, ancillary, flags, address = sock.recvmsg(1 << 18, 64)
    except InterruptedError:
        continue
    if not data:
        os._exit(0)
    fds = []
    for level, kind, blob in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(blob[i:i + 4], sys.byteorder)
                    for i in range(0, len(blob) - len(blob) % 4, 4)]
    fields = data.split(b"\0")
    if fields[0] == b"r" and fds:
        start(fields, fds)
    else:
        for fd in fds:
            os.close(fd)
        if fields[0] == b"k":
            signal(fields)
"""
