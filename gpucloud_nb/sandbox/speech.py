"""Offline speech recognition for the sandbox's ``/v1/audio/transcriptions``, with pocketsphinx.

The audio is decoded to 16 kHz mono 16-bit PCM, then read by pocketsphinx's bundled US English
model. WAV is decoded here with the standard library and numpy (PCM 8/16/24/32-bit, 32/64-bit
float, any rate, any number of channels); any other format goes through ``ffmpeg`` or ``sox``
when one is on ``PATH``.

    >>> from gpucloud_nb.sandbox.speech import transcribe
    >>> transcribe(open("notebooks/data/hello.wav", "rb").read(), "hello.wav")  # doctest: +SKIP
    'hello nice to meet you'

The decoder loads a ~37 MB model (about half a second), so it is created on first use and then
shared; a lock makes the shared decoder safe to call from several threads. pocketsphinx is a
small, fast model from before neural recognisers: clear speech of common words comes out well,
anything else only roughly.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pocketsphinx import Decoder

__all__ = ["MODELS", "MODEL_ID", "SAMPLE_RATE", "decoder", "to_pcm16k", "transcribe"]

MODEL_ID = "sandbox-speech-1"
"""The transcription model identifier the sandbox lists at ``/v1/models``."""

MODELS: tuple[dict[str, Any], ...] = (
    {"id": MODEL_ID, "object": "model", "created": 1_704_067_200, "owned_by": "gpucloud-sandbox"},
)
"""Model records in the shape a chat-completion client expects from ``GET /v1/models``."""

SAMPLE_RATE = 16_000
"""The sample rate the acoustic model was trained on."""

_CONVERTER_TIMEOUT = 300.0
_WHOLE_UTTERANCE_SECONDS = 60.0  # longer audio is cut at pauses and decoded piece by piece

_load_lock = threading.Lock()
_use_lock = threading.Lock()  # a Decoder is not thread-safe: one utterance at a time
_decoder: Decoder | None = None


def decoder() -> Decoder:
    """The shared pocketsphinx ``Decoder``, created on first use (the model takes ~0.5 s to load).

    A decoder handles one utterance at a time: call :func:`transcribe`, which takes the lock.

        >>> decoder() is decoder()
        True
    """
    global _decoder
    if _decoder is None:
        with _load_lock:
            if _decoder is None:
                from pocketsphinx import Decoder

                _decoder = Decoder(samprate=SAMPLE_RATE, loglevel="ERROR")
    return _decoder


# --------------------------------------------------------------------------------------------
# Decoding audio to 16 kHz mono 16-bit PCM


def _wav_samples(data: bytes) -> tuple[np.ndarray, int] | None:
    """Samples of a WAV file as float32 in [-1, 1], shape (frames, channels), and the rate.

    ``None`` for an encoding this reader does not handle (A-law, ADPCM, ...).
    """
    pos, fmt, payload = 12, None, None
    while pos + 8 <= len(data):
        chunk_id = data[pos: pos + 4]
        size = struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk_id == b"fmt " and size >= 16:
            fmt = struct.unpack_from("<HHIIHH", data, body)
            if size >= 26 and fmt[0] == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: real tag in the GUID
                fmt = (struct.unpack_from("<H", data, body + 24)[0], *fmt[1:])
        elif chunk_id == b"data":
            end = len(data) if size in (0, 0xFFFFFFFF) else min(body + size, len(data))
            payload = data[body:end]
            break
        pos = body + size + (size & 1)
    if fmt is None or payload is None:
        raise ValueError("the WAV file has no format or data chunk")
    tag, channels, rate, _, _, bits = fmt
    if channels < 1 or rate < 1:
        raise ValueError("the WAV file's format chunk is damaged")
    width = bits // 8
    usable = len(payload) - len(payload) % (width * channels) if width else 0
    payload = payload[:usable]
    if tag == 1 and bits == 8:
        samples = (np.frombuffer(payload, np.uint8).astype(np.float32) - 128) / 128
    elif tag == 1 and bits == 16:
        samples = np.frombuffer(payload, "<i2").astype(np.float32) / 32768
    elif tag == 1 and bits == 24:
        raw = np.frombuffer(payload, np.uint8).reshape(-1, 3).astype(np.int32)
        values = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        samples = (np.where(values >= 1 << 23, values - (1 << 24), values)
                   .astype(np.float32) / (1 << 23))
    elif tag == 1 and bits == 32:
        samples = (np.frombuffer(payload, "<i4") / 2.0**31).astype(np.float32)
    elif tag == 3 and bits in (32, 64):
        samples = np.frombuffer(payload, "<f4" if bits == 32 else "<f8").astype(np.float32)
    else:
        return None
    return samples.reshape(-1, channels), rate


def _lowpass(signal: np.ndarray, cutoff: float, taps: int = 101) -> np.ndarray:
    """Windowed-sinc low-pass filter; ``cutoff`` in cycles per sample (0 to 0.5)."""
    n = np.arange(taps) - (taps - 1) / 2
    kernel = 2 * cutoff * np.sinc(2 * cutoff * n) * np.blackman(taps)
    kernel /= kernel.sum()
    return np.convolve(signal, kernel.astype(np.float32), mode="same")


def _resample(signal: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a mono signal: low-pass below the target's Nyquist, then linear interpolation."""
    if rate == target or len(signal) == 0:
        return signal
    if rate > target:
        signal = _lowpass(signal, 0.45 * target / rate)
    count = int(len(signal) * target / rate)
    positions = np.arange(count, dtype=np.float64) * (rate / target)
    return np.interp(positions, np.arange(len(signal)), signal).astype(np.float32)


def _pcm16(signal: np.ndarray) -> bytes:
    """Floats in [-1, 1] to 16-bit samples; exact for audio that was 16-bit to begin with."""
    return np.clip(np.rint(signal * 32768), -32768, 32767).astype("<i2").tobytes()


def _convert_with_tool(data: bytes, filename: str | None) -> bytes:
    """Decode any format with ffmpeg (preferred) or sox, to 16 kHz mono 16-bit little-endian."""
    ffmpeg, sox = shutil.which("ffmpeg"), shutil.which("sox")
    if not ffmpeg and not sox:
        kind = os.path.splitext(filename or "")[1].lstrip(".") or "this audio"
        raise ValueError(
            f"the sandbox can only transcribe WAV without sox/ffmpeg; install ffmpeg (or sox) "
            f"to transcribe {kind}.")
    suffix = os.path.splitext(filename or "")[1].lower() or ".bin"
    with tempfile.TemporaryDirectory(prefix="gpucloud-speech-") as folder:
        source = os.path.join(folder, "input" + suffix)
        with open(source, "wb") as file:
            file.write(data)
        if ffmpeg:
            command = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", source,
                       "-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1",
                       "-ar", str(SAMPLE_RATE), "pipe:1"]
        else:
            assert sox is not None
            command = [sox, "-q", "-V1", source, "-t", "raw", "-e", "signed-integer", "-b", "16",
                       "-c", "1", "-r", str(SAMPLE_RATE), "--endian", "little", "-"]
        try:
            result = subprocess.run(command, capture_output=True, timeout=_CONVERTER_TIMEOUT,
                                    check=False)
        except subprocess.TimeoutExpired:
            raise ValueError("decoding the audio took too long.") from None
    tool = os.path.basename(command[0])
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = detail[-1] if detail else f"exit status {result.returncode}"
        raise ValueError(f"{tool} could not decode the audio ({reason}).")
    return result.stdout


def to_pcm16k(data: bytes, filename: str | None = None) -> bytes:
    """Decode audio to 16 kHz mono 16-bit little-endian PCM, the input pocketsphinx wants.

    WAV is decoded in-process (channels averaged, rate converted); other formats need ``ffmpeg``
    or ``sox`` on ``PATH``, else :class:`ValueError` says so.

        >>> len(to_pcm16k(one_second_of_44100_hz_stereo_wav))  # doctest: +SKIP
        32000
    """
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        decoded = _wav_samples(data)
        if decoded is not None:
            samples, rate = decoded
            mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
            return _pcm16(_resample(mono, rate))
    return _convert_with_tool(data, filename)


# --------------------------------------------------------------------------------------------
# Recognition


_QUIET = 100  # peak below this (about -50 dBFS) is silence, not speech
_PADDING = b"\0\0" * int(0.3 * SAMPLE_RATE)


def _decode(pcm: bytes) -> str:
    """One utterance, decoded from a fresh feature state so the result never depends on history.

    Without ``reinit_feat()`` the noise and cepstral-mean estimates carry over from the previous
    utterance and the same audio can come out differently. 0.3 s of silence on both sides gives
    those estimates something to start from; on synthetic speech it recognises clearly more words.
    """
    engine = decoder()
    engine.reinit_feat()
    engine.start_utt()
    engine.process_raw(_PADDING + pcm + _PADDING, full_utt=True)
    engine.end_utt()
    hypothesis = engine.hyp()
    return hypothesis.hypstr.strip() if hypothesis is not None else ""


def _speech_pieces(pcm: bytes) -> list[bytes]:
    """Cut long audio at pauses with pocketsphinx's voice-activity segmenter."""
    import io

    from pocketsphinx import Segmenter

    return [segment.pcm for segment in Segmenter(sample_rate=SAMPLE_RATE).segment(io.BytesIO(pcm))]


def transcribe(data: bytes, filename: str | None = None) -> str:
    """Transcribe speech in ``data`` (a WAV file, or any format ffmpeg/sox can decode) to text.

    Returns the recognised words in lower case, space-separated, or ``""`` when no speech was
    recognised. Audio up to a minute is decoded as one utterance; longer audio is cut at pauses
    and the pieces' words are joined. Raises :class:`ValueError` for audio it cannot decode.

        >>> transcribe(wav_bytes, "hello.wav")  # doctest: +SKIP
        'hello nice to meet you'
    """
    pcm = to_pcm16k(data, filename)
    seconds = len(pcm) / (2 * SAMPLE_RATE)
    if len(pcm) < 2 or int(np.abs(np.frombuffer(pcm, "<i2").astype(np.int32)).max()) < _QUIET:
        return ""  # silence: pocketsphinx would make words up from (near-)zero energy
    decoder()  # the first call loads the model before queueing for the decoder
    with _use_lock:
        if seconds <= _WHOLE_UTTERANCE_SECONDS:
            return _decode(pcm)
        words = [_decode(piece) for piece in _speech_pieces(pcm)]
    return " ".join(w for w in words if w)
