"""Fuzzing what a user or an adversary hands the harness: command lines, placement files and
completions. Every malformed command exits 2 with a message and no traceback, before any
work; a bad file is quoted by a short excerpt at most; every hostile completion scores 0
in bounded time, and a grading worker that dies is replaced.

Random cases come from ``random.Random(seed)``; the seed is in each test's id, and a
failure prints the case, so ``pytest -k 'seed=...'`` replays it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import string
import time
from pathlib import Path

import pytest
from harness_cli import run_harness

from harness.cli import main
from zoo.core.config import ConfigError
from zoo.placement.config import PlacementConfig

# ------------------------------------------------------------------ command lines

VALID_NOISE = [
    ["--seed", "3"],
    ["--steps", "2"],
    ["--prompts-per-step", "8"],
    ["--quiet"],
    ["--eval-every", "5"],
    ["--temperature", "0.7"],
    ["--placement", "local"],
    ["--mode", "sync"],
    ["--long-prompts", "truncate-left"],
    ["--skip-conformance"],
    ["--env", "arithmetic"],
    ["--set", "eps=0.3"],
    ["--env-set", "digits=3"],
    ["--checkpoint-every", "0"],
    ["--micro-batch-size", "4"],
    ["--lr", "1e-4"],
]
"""Valid flags mixed into each malformed command (none of them starts expensive work)."""


def _junk(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return "".join(rng.choices(string.printable, k=rng.randint(1, 30)))
    if kind == 1:  # arbitrary code points, lone surrogates included
        return "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randint(1, 10)))
    if kind == 2:
        return rng.choice(["nan", "inf", "-inf", "1e999", "-0", "0x10", "", " ", "None", "[]"])
    return str(rng.choice([-1, 0, 10**30, -(10**30), 2**63]))


def _poison(rng: random.Random) -> list[str]:
    """One malformed piece of a command line."""
    junk = _junk(rng)
    int_flags = [
        "--steps",
        "--prompts-per-step",
        "--group-size",
        "--max-response-len",
        "--eval-every",
        "--mini-batches",
        "--epochs",
        "--max-policy-age",
    ]
    float_flags = [
        "--lr",
        "--temperature",
        "--budget",
        "--budget-seconds",
        "--adam-beta1",
        "--correction-cap",
        "--adam-eps",
        "--min-lr-ratio",
    ]
    choice_flags = [
        "--placement",
        "--mode",
        "--device",
        "--generator",
        "--correction",
        "--long-prompts",
        "--lr-schedule",
        "--weight-sync",
        "--init",
    ]
    options = [
        lambda: [f"--{junk.strip('-') or 'x'}-no-such-flag", "1"],
        lambda: [rng.choice(int_flags), rng.choice(["abc", "1.5", "", "nan", "--", "1e999"])],
        lambda: [rng.choice(int_flags), rng.choice(["0", "-1", "-100"])],
        lambda: [rng.choice(float_flags), rng.choice(["nan", "-inf", "x", "-1", "1e999"])],
        lambda: [rng.choice(choice_flags), junk or "x"],
        lambda: [rng.choice(int_flags + float_flags + choice_flags + ["--set", "--out"])],
        lambda: [
            "--set",
            rng.choice(["", "=1", "noequals", f"{junk}=1", "eps=abc", "eps=", "beta=[1, 2]"]),
        ],
        lambda: [
            "--env-set",
            rng.choice(
                [
                    "digits=0",
                    "digits=99999999999",
                    "digits=x",
                    "ops=/",
                    "ops=",
                    f"{junk}=3",
                    "eval_size=-1",
                ]
            ),
        ],
        lambda: ["--group-size", rng.choice(["1", "16385", "99999999999999"])],
        lambda: ["--eval-samples", rng.choice(["-1", "16385", "999999999999"])],
        lambda: ["--micro-batch-size", "-3"],
        lambda: ["--model", rng.choice(["no_such_model", "/nonexistent", junk or "x"])],
        lambda: ["--model-path", rng.choice(["/nonexistent", "/etc", "/"])],
        lambda: ["--mode", "async"],  # async without --placement monarch
        lambda: ["--budget", "1e6", "--budget-samples", "100"],  # two budgets
        lambda: [junk or "x"],  # a stray positional
    ]
    return rng.choice(options)()


def malformed_command(rng: random.Random, out: Path) -> list[str]:
    command = rng.choice(["run", "compare"])
    algos = [rng.choice(["grpo", "dapo", "custom"])]
    if command == "run" and rng.random() < 0.1:
        algos = [rng.choice(["no_such_algo", "GRPO", ""])]
    pieces = [rng.choice(VALID_NOISE) for _ in range(rng.randint(0, 4))]
    argv = [command, *algos, "--out", str(out), *(x for p in pieces for x in p)]
    if command == "compare":
        argv += ["--budget", "1e15"]  # compare insists on a budget for real models
    # last, so that no valid flag after it overrides it (argparse keeps the last value)
    return argv + _poison(rng)


def call(argv: list[str], timeout_s: int = 60) -> tuple[int, str]:
    """``harness.cli.main(argv)`` in this process: (exit status, stderr)."""

    def hung(*_: object) -> None:
        raise TimeoutError(f"main({argv!r}) ran past {timeout_s} s")

    err = io.StringIO()
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue()


@pytest.mark.parametrize("seed", [2000, 2001, 2002, 2003], ids=lambda s: f"seed={s}")
def test_random_malformed_command_lines_exit_2_before_any_work(seed, tmp_path):
    """60 commands per seed, each with one malformed piece among valid flags."""
    rng = random.Random(seed)
    out = tmp_path / "run"
    for i in range(60):
        argv = malformed_command(rng, out)
        code, err = call(argv)  # an exception other than SystemExit fails the test here
        case = f"seed {seed} case {i}: {argv!r}"
        assert code == 2, f"{case} -> exit {code}: {err[-2000:]}"
        assert "Traceback" not in err and err.strip(), f"{case}: {err[-2000:]}"
        assert not out.exists(), f"{case} wrote {out}"
    assert not (Path.cwd() / "results" / "no_such").exists()


# ------------------------------------------------------------------ placement files

SECRET = "root:x:0:0:the-secret-line-of-a-private-file:/root:/bin/bash"


def laughs(depth: int = 9) -> str:
    """YAML whose value expands to 9^depth strings through aliases ("billion laughs")."""
    defs = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    defs += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, depth)]
    return "[" + ", ".join(defs) + "]"


BAD_FILES = {
    "not a mapping": f"{SECRET}\n" * 50,
    "a list": "- 1\n- 2\n",
    "unknown key": "servics: {}\n",
    "unknown service": "services: {learner: {}}\n",
    "string procs": "services: {trainer: {procs: '2'}}\n",
    "float procs": "services: {trainer: {procs: 2.0}}\n",
    "bool procs": "services: {trainer: {procs: true}}\n",
    "negative replicas": "services: {generator: {num_replicas: -1}}\n",
    "huge replicas": "services: {generator: {num_replicas: 99999999999999999999999}}\n",
    "huge procs": "services: {trainer: {procs: 123456789012345678901234567890}}\n",
    "huge degree": "parallelism: {tensor_parallel_degree: 100000000000000000000}\n",
    "inf procs": "services: {trainer: {procs: .inf}}\n",
    "model a list": "model: [a, b]\n",
    "model a mapping": "model: {x: 1}\n",
    "hosts a string": "hosts: tcp://node1:22222\n",
    "hosts without scheme": "hosts: [node1]\n",
    "on_failure unknown": "services: {generator: {on_failure: retry}}\n",
    "mixed key types": "1: x\nfoo: y\n",
    "null key": "~: 1\n",
    "laughs in model": f"model: {laughs()}\n",
    "laughs in hosts": f"hosts: {laughs()}\n",
    "laughs in procs": f"services: {{trainer: {{procs: {laughs()}}}}}\n",
    "laughs as key": f"services: {{trainer: {{? {laughs()} : 1}}}}\n",
    "recursive model": "model: &a [*a]\n",
    "recursive procs": "services: {trainer: {procs: &a [*a]}}\n",
    "recursive services": "services: &a {trainer: *a}\n",
    "deep nesting": "model: " + "[" * 5000 + "]" * 5000 + "\n",
    "bad yaml": f"services: {{trainer: [{SECRET}\n",
    "tab indent": f"services:\n\ttrainer: {SECRET}\n",
    "binary": bytes(range(256)) * 8,
    "secret line in a value": f"model: {{x: '{SECRET}'}}\n",
    "unknown key with a secret": f"'{SECRET}': 1\n",
    "long key": f"{'k' * 100000}: 1\n",
    "oversize": "# padding\n" * 200000,
}


def _mutated_file(rng: random.Random) -> str:
    """A placement file with one wrong value at a random place among valid ones."""
    services = {
        name: {"procs": 1, "num_replicas": 1, "with_gpus": False, "on_failure": "stop"}
        for name in ("generator", "trainer", "reference")
    }
    doc = {"model": "tiny", "services": services, "parallelism": {"tensor_parallel_degree": 1}}
    bad = rng.choice(
        [
            "x",
            1.5,
            True,
            None,
            [1],
            {"a": 1},
            -7,
            10**40,
            "1",
            float("inf"),
            "\x00" * 3,
        ]
    )
    where = rng.randrange(3)
    if where == 0:
        service = rng.choice(list(services))
        key = rng.choice(list(services[service]))
        bad = rng.choice([bad, 0, -1]) if key in ("procs", "num_replicas") else bad
        if type(bad) is type(services[service][key]) and bad not in (0, -1, 10**40):
            bad = [bad]  # same type: a valid value; make it wrong
        services[service][key] = bad
    elif where == 1:
        key = rng.choice(["hosts", "model", "parallelism"])
        # (any string is a model name here: --model's own check comes later)
        doc[key] = [bad] if key == "model" else rng.choice([bad, [bad], 10**40])
    else:
        doc[rng.choice(["extra", "Services", "procs", 0])] = bad
    return json.dumps(doc, default=str) if rng.random() < 0.5 else repr_yaml(doc)


def repr_yaml(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc)


def _check_refused(path: Path) -> str:
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        PlacementConfig.from_yaml(path)
    message = str(info.value)
    assert time.monotonic() - start < 5, f"{path.name}: {time.monotonic() - start:.1f} s"
    assert len(message) < 400 + len(str(path)), f"{path.name}: {message[:1000]}"
    assert SECRET not in message and "lol', 'lol', 'lol', 'lol', 'lol'" not in message
    return message


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_malformed_placement_file_is_refused_with_a_short_message(name, tmp_path):
    path = tmp_path / "placement.yaml"
    content = BAD_FILES[name]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    _check_refused(path)


def test_random_wrong_values_in_placement_files_are_refused(tmp_path):
    seed = 4242
    rng = random.Random(seed)
    for i in range(150):
        path = tmp_path / f"case{i}.yaml"
        path.write_text(_mutated_file(rng))
        try:
            _check_refused(path)
        except BaseException:
            print(f"seed {seed} case {i}:\n{path.read_text()}")
            raise


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: d, id="a folder"),
        pytest.param(lambda d: Path("/dev/zero"), id="/dev/zero"),
        pytest.param(lambda d: d / "missing.yaml", id="missing"),
    ],
)
def test_a_placement_path_that_is_no_file_is_refused(make, tmp_path):
    code, err = call(["run", "grpo", "--config", str(make(tmp_path)), "--out", str(tmp_path / "r")])
    assert code == 2 and "Traceback" not in err and "placement file" in err, err
    assert not (tmp_path / "r").exists()


def test_bad_input_through_the_real_command_shows_no_traceback(tmp_path):
    """A few cases in a subprocess, as a user meets them: exit 2, a one-line error on
    stderr, no traceback, the private file's content never echoed."""
    private = tmp_path / "passwd"
    private.write_text(f"{SECRET}\n" * 20)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"hosts: {laughs()}\n")
    for args in (
        ["run", "grpo", "--config", str(private)],
        ["run", "grpo", "--config", str(bomb)],
        ["run", "grpo", "--lr", "nan", "--temperature", "inf"],
    ):
        result = run_harness(*args, "--out", str(tmp_path / "r"), cwd=tmp_path, timeout=120)
        assert result.returncode == 2, (args, result.stderr[-3000:])
        assert "Traceback" not in result.stderr and SECRET not in result.stderr, args
        assert result.stderr.strip().startswith("error:"), result.stderr[-2000:]
        assert len(result.stderr) < 1000, result.stderr[-2000:]
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ completions


def hostile_completions(rng: random.Random) -> list[str]:
    raw = bytes(rng.randrange(256) for _ in range(4096))
    return [
        raw.decode("latin-1"),  # random bytes as text
        raw.decode("utf-8", errors="surrogateescape"),  # invalid UTF-8, kept as surrogates
        raw.decode("utf-8", errors="replace"),
        "\udcff\ud800" * 1000,
        "\x00" * 10000,
        "7" * (1 << 20),  # a megabyte of digits (int() refuses past 4,300)
        "-" + "9" * 5000,
        "".join(rng.choices(string.printable, k=1 << 20)),  # a megabyte of text
        "\\frac{" * 3000 + "1" + "}{2}" * 3000,  # deeply nested LaTeX
        "\\boxed{" * 2000 + "1" + "}" * 2000,
        "\\boxed{9^{9^{9^{9}}}}",
        "\\boxed{" + "(" * 10000 + ")" * 10000 + "}",
    ]


def test_hostile_completions_score_zero_on_arithmetic():
    from zoo.envs import get_env

    env = get_env("arithmetic")
    prompt = env.eval_prompts()[0]
    for text in hostile_completions(random.Random(7)):
        start = time.monotonic()
        assert env.score(prompt, text) == 0.0, text[:80]
        assert time.monotonic() - start < 1
    assert env.score(prompt, f" {prompt.answer}\n") == 1.0


@pytest.fixture(scope="module")
def gsm8k_env(tmp_path_factory):
    from zoo.envs import get_env

    d = tmp_path_factory.mktemp("gsm8k")
    rows = [
        {"question": f"What is {n} + {n}?", "answer": f"{n}+{n}={2 * n}\n#### {2 * n}"}
        for n in range(100, 140)
    ]
    for name, part in (("train.jsonl", rows[:30]), ("test.jsonl", rows[30:])):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    env = get_env(
        "gsm8k",
        data_files=str(d / "train.jsonl"),
        eval_files=str(d / "test.jsonl"),
        grading_timeout_s=1.5,
        grading_workers=2,
    )
    yield env
    env.grader.close()


def _score_bounded(env, prompt, text: str) -> float:
    start = time.monotonic()
    reward = env.score(prompt, text)
    took = time.monotonic() - start
    # the timeout, plus a fresh worker's start-up (~1-3 s on a busy machine)
    assert took < env.config.grading_timeout_s + 8, f"{took:.1f} s for {text[:60]!r}"
    return reward


def test_hostile_completions_score_zero_through_the_math_grader(gsm8k_env):
    """Through the real path: the env's score, a grading worker process per request, its
    timeout and memory cap. After each, a right answer still scores 1: the run goes on."""
    env = gsm8k_env
    prompt = env.eval_prompts()[0]
    right = f"so \\boxed{{{prompt.answer}}}"
    assert env.score(prompt, right) == 1.0
    env.reset_stats()
    for text in hostile_completions(random.Random(11)):
        assert _score_bounded(env, prompt, text) == 0.0, text[:80]
    assert env.score(prompt, right) == 1.0
    stats = env.stats
    assert stats["correct"] == 1 and stats["timeouts"] + stats["errors"] >= 1, stats


def test_a_killed_grading_worker_is_replaced(gsm8k_env):
    env = gsm8k_env
    prompt = env.eval_prompts()[1]
    right = f"\\boxed{{{prompt.answer}}}"
    assert env.score(prompt, right) == 1.0
    pids = [w.proc.pid for w in env.grader._all if w.proc is not None and w.proc.poll() is None]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rewards = env.score_batch([prompt] * 4, [right, "\\boxed{-1}", right, "junk"])
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    alive = [w.proc.pid for w in env.grader._all if w.proc is not None and w.proc.poll() is None]
    assert alive and not set(alive) & set(pids)


EXPLOSIVE = [
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{10^{10^{10^{10}}}}",
    "\\boxed{(10^{100000})!}",
    "\\boxed{100000000!}",
    "\\boxed{2^{2^{2^{2^{2^{2^{2}}}}}}}",
    "\\boxed{" + "x^{" * 200 + "2" + "}" * 200 + "}",
    "\\boxed{\\sum_{n=1}^{10^{12}} n^{n}}",
    "\\boxed{" + "+".join(["10^{10^{6}}"] * 50) + "}",
    "$" + "\\sqrt{" * 3000 + "2" + "}" * 3000 + "$",
    "\\boxed{\\frac{" * 500 + "1" + "}{3}}" * 500,
]


@pytest.mark.slow
def test_expressions_that_explode_in_time_or_memory_score_zero(gsm8k_env):
    env = gsm8k_env
    prompt = env.eval_prompts()[2]
    right = f"\\boxed{{{prompt.answer}}}"
    for text in EXPLOSIVE:
        assert _score_bounded(env, prompt, text) == 0.0, text[:80]
        assert env.score(prompt, right) == 1.0, text[:80]


@pytest.mark.slow
def test_hostile_completions_score_zero_on_pyfunc():
    """Junk expressions for pyfunc: rejected on the host or run (and failed) in the
    sandbox."""
    from zoo.envs import get_env

    env = get_env("pyfunc")
    prompt = env.eval_prompts()[0]
    texts = [
        *hostile_completions(random.Random(13)),
        "9**9**9**9",
        "(lambda: [0] * 10**12)()",
        "__import__('os').system('true')",
        "[x for x in iter(int, 1)]",
        "x" + "+x" * 50000,
    ]
    start = time.monotonic()
    rewards = env.score_batch([prompt] * len(texts), texts)
    assert rewards == [0.0] * len(texts)
    assert time.monotonic() - start < 120
    assert env.score(prompt, env.reference_answer(prompt)) == 1.0
