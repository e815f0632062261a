"""A process's captured output, bounded: the first and the last bytes it wrote.

A runner's stdout and stderr go into an :class:`OutputTail` read by a thread, so a flood
of output costs only CPU (the judge's watchdog stops it past ``output_mb``) and the error
message of a record still shows how the output began and ended.

Not covered: anything in the middle of a long output.
"""

from __future__ import annotations

import threading


class OutputTail:
    """Keeps the first and last bytes a process writes; a flood costs only CPU."""

    def __init__(self, stream, head: int = 8192, tail: int = 32768) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._limits = (head, tail)
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        head, tail = self._limits
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            if len(self.head) < head:
                self.head += chunk[: head - len(self.head)]
            self.tail += chunk
            if len(self.tail) > tail:
                del self.tail[: len(self.tail) - tail]

    def text(self) -> str:
        self._thread.join(timeout=0.5)
        if self.total <= len(self.head) + 1:
            return self.head.decode(errors="replace")
        return (self.head.decode(errors="replace") + f"\n... [{self.total} bytes of output]"
                " ...\n" + self.tail.decode(errors="replace"))
