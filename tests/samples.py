"""Sample media built in memory for the tests (imported as ``samples``; pytest puts ``tests/`` on
``sys.path``).

    >>> from samples import silent_wav
    >>> len(silent_wav(0.1))
    3244
"""

from __future__ import annotations

import io
import wave


def silent_wav(seconds: float = 0.2) -> bytes:
    """A silent 16 kHz mono 16-bit WAV of ``seconds``."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\0\0" * int(16000 * seconds))
    return buffer.getvalue()
