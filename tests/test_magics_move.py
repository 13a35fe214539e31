"""``%gpucloud checkpoint``, ``restore`` and ``move``: their grammar (the runs are
``test_kernel_move``'s, with real kernels on the sandbox)."""

from __future__ import annotations

import pytest

from gpucloud_nb.magics_parse import Stop, parse


def test_move_and_restore_take_an_instance_or_a_new_one_by_gpu_and_price() -> None:
    move = parse("move --gpu H100 --max-price 3")
    assert (move.command, move.target, move.gpu, move.max_price, move.keep) == (
        "move", None, "H100", 3.0, False)
    assert (parse("move big-box --keep").target, parse("move big-box --keep").keep) == (
        "big-box", True)
    restore = parse("restore 20261128T1502 big-box")
    assert (restore.checkpoint, restore.target, restore.gpu, restore.max_price) == (
        "20261128T1502", "big-box", None, None)
    assert parse("restore --gpu L4").gpu == "L4"
    assert parse("checkpoint --keep 2").keep == 2
    assert parse("checkpoint --every 15min --keep 3").every == 900.0
    assert (parse("checkpoint --every off").every, parse("checkpoint --every").every,
            parse("checkpoint").every) == ("off", "status", None)


@pytest.mark.parametrize("line", ["move --max-price -1", "restore --max-price nothing",
                                  "checkpoint --keep 0", "checkpoint --every 15",
                                  "checkpoint --every soon"])
def test_a_bad_price_or_count_is_one_sentence(line: str) -> None:
    with pytest.raises(Stop) as stopped:
        parse(line)
    assert "\n" not in str(stopped.value).strip() and "Traceback" not in str(stopped.value)
