"""`ortrun chat` driven through a pseudo-terminal (pexpect) and a pipe on a tiny model folder: the second turn
prefills only its new tokens, /clear empties the cache, Ctrl-C ends an answer (not the program) and the next
turn reuses the cache, a full context drops the oldest turns with one line, /bye exits 0; from a pipe, one turn
per line."""

import os
import re
import subprocess
import sys

import pexpect  # the chat tests drive a pseudo-terminal; a test dependency (nox TEST_TOOLS)

ORTRUN = "import sys; from ort_session.cli import main; sys.exit(main())"
STATS = re.compile(r"(\d+) tokens, [\d.]+ tokens/s; prefill (\d+) tokens \(cached (\d+)\)[^\n]*")


def _spawn(*args, history=""):
    env = {**os.environ, "ORTRUN_CHAT_HISTORY": str(history)}
    child = pexpect.spawn(sys.executable, ["-c", ORTRUN, "chat", *map(str, args)], encoding="utf-8", timeout=90,
                          dimensions=(40, 400), env=env)
    child.expect(">>> ")
    return child


def _turn(child, text):
    child.sendline(text)
    child.expect(STATS)
    stats = child.match
    child.expect(">>> ")
    return int(stats.group(1)), int(stats.group(2)), int(stats.group(3)), stats.group(0)


def test_second_turn_prefills_only_its_new_tokens_and_clear_resets(folder, tmp_path):
    child = _spawn(folder, "-n", "8", "--temperature", "0", "--ignore-eos", history=tmp_path / "history")
    try:
        # <|im_start|> user w7 w8 w9 <|im_end|> <|im_start|> assistant: 8 tokens, none cached
        assert _turn(child, "w7 w8 w9")[:3] == (8, 8, 0)
        # cached: those 8 and 7 of the 8 answer tokens (the last one was never fed); new: the last answer token,
        # <|im_end|> <|im_start|> user w10 w11 <|im_end|> <|im_start|> assistant
        generated, prefill, cached, line = _turn(child, "w10 w11")
        assert (generated, prefill, cached) == (8, 9, 15) and "re-prefilled" not in line, line
        assert "0 runtime allocations" in line
        child.sendline("/clear")
        child.expect("conversation cleared")
        child.expect(">>> ")
        assert _turn(child, "w12")[1:3] == (6, 0)
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "history").read_text().splitlines()[-5:] == ["w7 w8 w9", "w10 w11", "/clear", "w12", "/bye"]


def test_ctrl_c_ends_the_answer_and_the_next_turn_reuses_the_cache(long_folder):
    child = _spawn(long_folder, "-n", "2000", "--temperature", "0", "--ignore-eos")
    try:
        child.sendline("w7 w8")
        child.expect(r" w\d+ w\d+")  # the answer is streaming
        child.sendintr()
        child.expect(STATS)
        first = child.match
        assert "interrupted (Ctrl-C)" in first.group(0) and int(first.group(1)) < 1500
        child.expect(">>> ")
        child.sendline("w9")
        child.expect(r" w\d+ w\d+")
        child.sendintr()
        child.expect(STATS)
        generated, prefill, cached = (int(g) for g in child.match.groups())
        # the interrupted answer's fed tokens stay cached (the 7 prompt tokens and its tokens, the last one fed or not,
        # as Ctrl-C fell); new: what the cache lacks of <|im_end|> <|im_start|> user w9 <|im_end|> <|im_start|> assistant
        shown = int(first.group(1))
        assert first.group(2) == "7" and shown >= 1
        assert cached in (7 + shown - 1, 7 + shown) and cached + prefill == 7 + shown + 7, child.match.group(0)
        assert "re-prefilled" not in child.match.group(0)
        child.expect(">>> ")
        child.sendintr()  # Ctrl-C at the prompt: a hint, not the end
        child.expect("Ctrl-D or /bye leaves")
        child.sendline("/system be brief")
        child.expect("system prompt set")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_pipe_runs_one_turn_per_line(folder):
    run = subprocess.run([sys.executable, "-c", ORTRUN, "chat", str(folder), "-n", "3", "--temperature", "0",
                          "--ignore-eos", "--system", "w5"], input="w7 w8\n\n/clear\nw9\n/nope\n",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answers = run.stdout.splitlines()
    assert len(answers) == 2 and all(len(a.split()) == 3 for a in answers), run.stdout
    stats = STATS.findall(run.stderr)
    # the system turn: <|im_start|> system w5 <|im_end|> before the user's 6 (w7 w8) or 5 (w9) tokens
    assert [(int(p), int(c)) for _, p, c in stats] == [(4 + 7, 0), (4 + 6, 0)], run.stderr
    assert "conversation cleared" in run.stderr and "unknown command '/nope'" in run.stderr
    assert ">>>" not in run.stdout


def test_a_turn_beyond_the_context_is_refused_and_the_chat_goes_on(folder):
    words = " ".join(f"w{6 + i % 200}" for i in range(300))
    run = subprocess.run([sys.executable, "-c", ORTRUN, "chat", str(folder), "-n", "2", "--temperature", "0",
                          "--ignore-eos"], input=f"{words}\nw7\n", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "this turn makes the conversation 305 tokens, more than the context of 256" in run.stderr
    assert [(int(p), int(c)) for _, p, c in STATS.findall(run.stderr)] == [(6, 0)]


def test_a_full_context_drops_the_oldest_turns_with_one_line_and_the_chat_goes_on(folder):
    child = _spawn(folder, "-c", "64", "-n", "8", "--temperature", "0", "--ignore-eos", "--system", "w5")
    try:
        for text in ("w7", "w8", "w9", "w10"):  # the system prompt 4 tokens, each turn 4 + 11 (8 answer words)
            assert "context full" not in _turn(child, text)[3]
        # 4 + 4 x 15 + 15 = 79 tokens: the two oldest turns go; the system prompt and <|im_start|> user stay cached
        child.sendline(" ".join(f"w{20 + i}" for i in range(10)))
        child.expect(r"\(context full: dropped the 2 oldest turns\)\r?\n")
        child.expect(STATS)
        assert (int(child.match.group(1)), int(child.match.group(2)), int(child.match.group(3))) == (8, 49 - 6, 6)
        child.expect(">>> ")
        child.sendline(" ".join(["w6"] * 70))  # alone (with the system prompt) beyond the context: refused
        child.expect("error: this message alone makes the turn 79 tokens \\(all 3 earlier turns dropped, the system "
                     "prompt kept\\), more than the context of 64")
        child.expect(">>> ")
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_bad_sampling_flag_is_refused_by_name(folder):
    run = subprocess.run([sys.executable, "-c", ORTRUN, "chat", str(folder), "--top-p", "0"], input="",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "top_p=0.0 is out of range" in run.stderr, run.stderr


def test_the_chat_command_registers_without_numpy():
    code = ("import sys; from ort_session._cli_args import build_parser; p = build_parser(); "
            "a = p.parse_args(['chat', 'm', '--stop', 'x', '--top-k', '3']); "
            "print('numpy' in sys.modules, a.fn.__module__, a.stop, a.top_k)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["False", "ort_serve._chat_cli", "['x']", "3"], run.stderr
