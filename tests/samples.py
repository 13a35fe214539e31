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


def same_id_two_providers() -> list[dict]:
    """Two offers with one ``instanceId``: "Cheap Cloud" at $1/h and "Pricey Cloud" at $50/h.

        >>> sandbox_factory(offers=same_id_two_providers())
    """
    import copy

    from gpucloud_nb.sandbox.catalogue import instance_offers

    base = next(o for o in instance_offers() if o["deploymentType"] == "vm"
                and any(a["available"] for a in o["availability"]))
    offers = []
    for provider, name, price in (("0123456789abcdef01234567", "Cheap Cloud", 1.0),
                                  ("fedcba9876543210fedcba98", "Pricey Cloud", 50.0)):
        offer = copy.deepcopy(base)
        offer.update(instanceId="gpu-1x", hourlyPrice=price,
                     cloud={"_id": provider, "name": name})
        for region in offer["availability"]:
            region["available"] = True
        offers.append(offer)
    return offers


def one_offer(price: float) -> list[dict]:
    """One available VM offer, ``gpu-1x`` of "Cheap Cloud", at ``price`` dollars per hour.

        >>> sandbox_factory(offers=one_offer(3600.0))   # a dollar a second
    """
    return [{**same_id_two_providers()[0], "hourlyPrice": price}]


#: Code a notebook defines (a function and a class in ``__main__``), which a kernel's namespace
#: must carry by value: shared by the namespace and the move tests.
NOTEBOOK_DEFINITIONS = """\
def double(x):
    return 2 * x
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5
"""
