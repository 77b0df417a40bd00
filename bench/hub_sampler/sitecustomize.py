"""A CPU-time sampler of a controller's hub (its main thread), loaded by bench/hub_profile.py.

With ``HPCFABRIC_HUB_PROFILE=PREFIX`` in the environment of ``hpcfabric controller`` (this directory on
``PYTHONPATH``), a POSIX timer on the main thread's own CPU clock sends SIGPROF every
``HPCFABRIC_HUB_PROFILE_US`` microseconds of that thread's CPU (the kernel checks CPU timers at its tick:
~4 ms); the handler counts the Python stack it interrupted. The first SIGUSR2 starts counting, the next
writes ``PREFIX.PID`` (one ``frame;frame;... count`` line per stack, root first) and stops. Samples are
CPU time, not wall time: a thread waiting for a core or for the GIL is not sampled (py-spy's are).
"""

import os

_CMD = open("/proc/self/cmdline", "rb").read().split(b"\0")  # noqa: SIM115
if os.environ.get("HPCFABRIC_HUB_PROFILE") and b"hpcfabric.cli" in _CMD and b"controller" in _CMD:
    import collections
    import ctypes
    import signal
    import threading

    class _SigEvent(ctypes.Structure):
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("tid", ctypes.c_int), ("pad", ctypes.c_int * 11)]

    class _Ts(ctypes.Structure):
        _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

    class _Its(ctypes.Structure):
        _fields_ = [("interval", _Ts), ("value", _Ts)]

    def _install(prefix: str, period_us: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.pthread_self.restype = ctypes.c_ulong
        clock = ctypes.c_int()
        if libc.pthread_getcpuclockid(ctypes.c_ulong(libc.pthread_self()), ctypes.byref(clock)):
            return
        event = _SigEvent(None, signal.SIGPROF, 4, threading.get_native_id())  # SIGEV_THREAD_ID
        timer = ctypes.c_void_p()
        if libc.timer_create(clock, ctypes.byref(event), ctypes.byref(timer)):
            return
        stacks: collections.Counter = collections.Counter()
        on = [False]

        def sample(_sig: int, frame: object) -> None:
            if not on[0]:
                return
            names = []
            while frame is not None:
                code = frame.f_code  # type: ignore[attr-defined]
                names.append(f"{code.co_qualname} ({os.path.basename(code.co_filename)})")
                frame = frame.f_back  # type: ignore[attr-defined]
            stacks[tuple(reversed(names))] += 1

        def toggle(_sig: int, _frame: object) -> None:
            if not on[0]:
                stacks.clear()
                on[0] = True
                return
            on[0] = False
            with open(f"{prefix}.{os.getpid()}", "w", encoding="utf-8") as fh:
                for stack, n in stacks.items():
                    fh.write(";".join(stack) + f" {n}\n")

        signal.signal(signal.SIGPROF, sample)
        signal.signal(signal.SIGUSR2, toggle)
        period = _Ts(period_us // 1_000_000, period_us % 1_000_000 * 1000)
        libc.timer_settime(timer, 0, ctypes.byref(_Its(period, period)), None)

    _install(os.environ["HPCFABRIC_HUB_PROFILE"], int(os.environ.get("HPCFABRIC_HUB_PROFILE_US", "1000")))
