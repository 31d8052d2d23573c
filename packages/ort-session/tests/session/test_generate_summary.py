"""`ortrun generate`'s closing line: prompt processing and generation speeds apart, the time to first token,
and Ctrl-C ending the line with what was generated and the timings (exit 130)."""

from __future__ import annotations

import re

import pytest

from ort_graph import zoo
from ort_session.cli import main


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return str(zoo.write_decoder(tmp_path_factory.mktemp("m") / "decoder.onnx", zoo.DecoderConfig(layers=2)))


def test_summary_gives_prompt_and_generation_speeds_and_time_to_first_token(model_path, capsys):
    assert main(["generate", model_path, "--prompt", "hello", "-n", "5"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "time to first token" in x)
    assert re.search(r"5 tokens: prompt 5 tokens in [\d.]+ ms \([\d.]+ tokens/s; time to first token [\d.]+ ms\), "
                     r"generation 4 tokens in [\d.]+ s \([\d.]+ tokens/s\)", line), line
    assert "0 runtime allocations" in line


def test_ctrl_c_ends_the_line_prints_what_was_made_and_exits_130(model_path, capsys, monkeypatch):
    import ort_session._generate as gen

    real = gen.generate

    def interrupted(*args, **kwargs):
        for i, token in enumerate(real(*args, **kwargs)):
            if i == 3:
                raise KeyboardInterrupt
            yield token

    monkeypatch.setattr(gen, "generate", interrupted)
    assert main(["generate", model_path, "--prompt", "hello", "-n", "10"]) == 130
    captured = capsys.readouterr()
    assert captured.out.startswith("hello") and captured.out.endswith("\n")  # the line is finished
    line = next(x for x in captured.err.splitlines() if "time to first token" in x)
    assert line.split(": ", 1)[0].endswith("3 tokens") and "interrupted (Ctrl-C)" in line
