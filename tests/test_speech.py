"""gpucloud_nb.sandbox.speech: offline transcription with pocketsphinx, on speech made by espeak-ng.

espeak-ng and sox are system packages (Debian: ``apt-get install espeak-ng sox``). Without them
these tests skip locally, but fail in CI (``CI=true``), where they must be installed.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from gpucloud_nb.media import check_audio
from gpucloud_nb.sandbox import speech
from gpucloud_nb.sandbox.speech import SAMPLE_RATE, to_pcm16k, transcribe

HELLO_WAV = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "hello.wav"

# A voice and phrase pocketsphinx's small model gets right at any espeak-ng speed from 130 to 170
# words per minute (checked with espeak-ng 1.51); assertions still only ask for most of the words.
VOICE = "en-us+f2"
PHRASE = "the united states of america"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install espeak-ng sox)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must have it")
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The phrase spoken by espeak-ng (22,050 Hz) and resampled by sox to 16 kHz mono 16-bit."""
    espeak, sox = _tool("espeak-ng"), _tool("sox")
    folder = tmp_path_factory.mktemp("speech")
    native, wav16k = folder / "native.wav", folder / "phrase16k.wav"
    subprocess.run([espeak, "-v", VOICE, "-s", "140", "-w", str(native), PHRASE], check=True)
    subprocess.run([sox, str(native), "-r", "16000", "-c", "1", "-b", "16", str(wav16k)],
                   check=True)
    return {"native": native, "16k": wav16k}


def _words(text: str) -> set[str]:
    return set(text.lower().split())


def _wav(samples: np.ndarray, rate: int, *, bits: int = 16, float_format: bool = False) -> bytes:
    """A WAV file of ``samples`` (frames × channels, floats in [-1, 1])."""
    channels = samples.shape[1]
    if float_format:
        body, tag = samples.astype("<f4").tobytes(), 3
    elif bits == 8:
        body, tag = (samples * 127 + 128).astype(np.uint8).tobytes(), 1
    elif bits == 16:
        body, tag = (samples * 32767).astype("<i2").tobytes(), 1
    else:  # 24-bit
        ints = (samples * 8_388_607).astype("<i4").reshape(-1)
        body, tag = ints.view(np.uint8).reshape(-1, 4)[:, :3].tobytes(), 1
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVE" + b"fmt "
            + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(body)) + body)


# --------------------------------------------------------------------------------------------
# Recognition


@pytest.fixture(scope="module")
def phrase_text(spoken: dict[str, Path]) -> str:
    return transcribe(spoken["16k"].read_bytes(), "phrase16k.wav")


@pytest.fixture(scope="module")
def hello_text() -> str:
    return transcribe(HELLO_WAV.read_bytes(), "hello.wav")


def test_espeak_phrase_resampled_by_sox_is_recognised(phrase_text: str) -> None:
    assert len(_words(phrase_text) & {"united", "states", "america"}) >= 2, phrase_text


def test_native_rate_wav_is_resampled_in_process(spoken: dict[str, Path]) -> None:
    data = spoken["native"].read_bytes()
    assert struct.unpack_from("<I", data, 24)[0] == 22050  # espeak-ng's own rate
    text = transcribe(data, "native.wav")
    assert len(_words(text) & {"united", "states", "america"}) >= 2, text


def test_bundled_hello_wav(hello_text: str) -> None:
    data = HELLO_WAV.read_bytes()
    assert len(data) < 200_000
    audio = check_audio(HELLO_WAV)
    assert (audio.format, audio.duration_seconds) == ("wav", pytest.approx(3.05, abs=0.05))
    assert data[22:24] == b"\x01\x00" and struct.unpack_from("<I", data, 24)[0] == 16000
    assert "hello" in _words(hello_text), hello_text
    assert len(_words(hello_text) & {"nice", "meet", "you"}) >= 2, hello_text


def test_concurrent_calls_share_one_decoder_and_history_does_not_matter(
        spoken: dict[str, Path], hello_text: str, phrase_text: str) -> None:
    """Two threads at once, after other utterances: each gets exactly its own earlier text."""
    jobs = {"hello": HELLO_WAV.read_bytes(), "phrase": spoken["16k"].read_bytes()}
    results: dict[str, str] = {}

    def run(key: str) -> None:
        results[key] = transcribe(jobs[key])

    threads = [threading.Thread(target=run, args=(key,)) for key in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"hello": hello_text, "phrase": phrase_text}
    assert speech.decoder() is speech.decoder()


def test_long_audio_is_cut_at_pauses(monkeypatch: pytest.MonkeyPatch, hello_text: str) -> None:
    monkeypatch.setattr(speech, "_WHOLE_UTTERANCE_SECONDS", 5.0)  # instead of a minute
    hello = np.frombuffer(to_pcm16k(HELLO_WAV.read_bytes()), "<i2") / 32768
    pause = np.zeros(SAMPLE_RATE)
    twice = np.concatenate([pause, hello, pause, hello, pause])[:, None]  # about 9 s
    assert transcribe(_wav(twice, SAMPLE_RATE)) == f"{hello_text} {hello_text}"


def test_silence_gives_empty_text() -> None:
    assert transcribe(_wav(np.zeros((SAMPLE_RATE, 1)), SAMPLE_RATE)) == ""
    hiss = np.random.default_rng(0).normal(0, 0.0005, (SAMPLE_RATE, 1))
    assert transcribe(_wav(hiss, SAMPLE_RATE)) == ""
    assert transcribe(_wav(np.zeros((0, 1)), SAMPLE_RATE)) == ""


def test_other_formats_go_through_ffmpeg_or_sox(spoken: dict[str, Path], tmp_path: Path) -> None:
    sox = _tool("sox")
    flac = tmp_path / "phrase.flac"
    subprocess.run([sox, str(spoken["16k"]), str(flac)], check=True)
    # FLAC is lossless and already 16 kHz mono: the converter must give back the very samples.
    assert to_pcm16k(flac.read_bytes(), "phrase.flac") == to_pcm16k(spoken["16k"].read_bytes())
    with pytest.raises(ValueError, match="could not decode"):
        transcribe(b"\x00\x01 not audio at all", "noise.mp3")


def test_without_sox_or_ffmpeg_only_wav(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="the sandbox can only transcribe WAV without sox/ffmpeg"):
        transcribe(b"ID3\x04" + bytes(100), "song.mp3")
    assert to_pcm16k(_wav(np.zeros((160, 1)), SAMPLE_RATE)) == bytes(320)  # WAV needs neither


# --------------------------------------------------------------------------------------------
# Decoding WAV to 16 kHz mono 16-bit


def _tone(rate: int, seconds: float, channels: int, frequency: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    wave = 0.5 * np.sin(2 * math.pi * frequency * t)
    return np.repeat(wave[:, None], channels, axis=1)


@pytest.mark.parametrize("rate,channels,bits,float_format", [
    (44100, 2, 16, False), (48000, 1, 24, False), (8000, 1, 8, False), (22050, 2, 32, True),
    (16000, 1, 16, False)])
def test_wav_encodings_become_16k_mono(rate: int, channels: int, bits: int,
                                       float_format: bool) -> None:
    pcm = to_pcm16k(_wav(_tone(rate, 1.0, channels), rate, bits=bits, float_format=float_format))
    samples = np.frombuffer(pcm, "<i2").astype(np.float64) / 32767
    assert len(samples) == SAMPLE_RATE
    middle = samples[2000:-2000]
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(0.5 / math.sqrt(2), rel=0.05)
    spectrum = np.abs(np.fft.rfft(middle))
    peak = np.argmax(spectrum) * SAMPLE_RATE / len(middle)
    assert peak == pytest.approx(440, abs=5)


def test_downsampling_removes_frequencies_above_8_khz() -> None:
    pcm = to_pcm16k(_wav(_tone(48000, 1.0, 1, frequency=11_000), 48000))
    samples = np.frombuffer(pcm, "<i2").astype(np.float64) / 32767
    # Without the low-pass filter, 11 kHz would fold back to 5 kHz at full strength.
    assert np.sqrt(np.mean(samples[2000:-2000] ** 2)) < 0.02


def test_damaged_wav_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no format or data chunk"):
        to_pcm16k(b"RIFF\x04\x00\x00\x00WAVE")
