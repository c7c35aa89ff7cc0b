"""Reading vLLM command lines: every accepted form, and errors that name the flag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_rollout.budget.args import (
    SpeculativeConfig,
    VllmArgs,
    VllmArgsError,
    parse_vllm_args,
)
from inference_rollout.budget.units import parse_human_int


def test_no_args_are_vllm_defaults() -> None:
    assert parse_vllm_args([]) == VllmArgs()
    assert VllmArgs().gpu_memory_utilization == 0.9


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--max-num-seqs", "32"], {"max_num_seqs": 32}),
        (["--max-num-seqs=32"], {"max_num_seqs": 32}),
        (["--max_num_seqs=32"], {"max_num_seqs": 32}),  # vLLM accepts underscores
        (["--max-model-len", "32k"], {"max_model_len": 32000}),
        (["--max-model-len", "32K"], {"max_model_len": 32768}),
        (["--max-model-len", "auto"], {"max_model_len": None, "max_model_len_auto": True}),
        (["--max-model-len", "-1"], {"max_model_len": None, "max_model_len_auto": True}),
        (["-tp", "4", "-pp", "2"], {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}),
        (["--tensor-parallel-size=8"], {"tensor_parallel_size": 8}),
        (["--dtype", "half"], {"dtype": "half"}),
        (["--kv-cache-dtype", "FP8"], {"kv_cache_dtype": "fp8"}),
        (["-q", "awq"], {"quantization": "awq"}),
        (["--quantization", "None"], {"quantization": None}),
        (["--gpu-memory-utilization", "0.95"], {"gpu_memory_utilization": 0.95}),
        (["--enable-chunked-prefill"], {"enable_chunked_prefill": True}),
        (["--no-enable-chunked-prefill"], {"enable_chunked_prefill": False}),
        (["--enable-chunked-prefill", "false"], {"enable_chunked_prefill": False}),
        (["--enable-chunked-prefill=False"], {"enable_chunked_prefill": False}),
        (["--kv-cache-memory-bytes", "20G"], {"kv_cache_memory_bytes": 20 * 2**30}),
        (["--cpu-offload-gb", "4"], {"cpu_offload_gb": 4.0}),
        (["--max-num-batched-tokens", "16k"], {"max_num_batched_tokens": 16000}),
        (["--max-num-seqs", "8", "--max-num-seqs", "16"], {"max_num_seqs": 16}),  # last wins
    ],
)
def test_flag_forms(argv: list[str], expected: dict[str, object]) -> None:
    parsed = parse_vllm_args(argv)
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        (["--model", "meta-llama/Llama-3.1-8B-Instruct"], "meta-llama/Llama-3.1-8B-Instruct"),
        (["vllm", "serve", "Qwen/Qwen2.5-7B", "--port", "8000"], "Qwen/Qwen2.5-7B"),
        (["serve", "m", "--model", "ignored"], "m"),  # the positional wins, as in vLLM
        (["Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "8"], "Qwen/Qwen2.5-7B-Instruct"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "m"),
        (["--trust-remote-code", "--model", "m"], "m"),
        (["sh", "-c", "FOO=1 exec vllm serve org/m --max-num-seqs 4 && sleep 1"], "org/m"),
    ],
)
def test_model_from_flag_or_positional(argv: list[str], model: str) -> None:
    assert parse_vllm_args(argv).model == model


def test_shell_wrapper_flags_are_read() -> None:
    parsed = parse_vllm_args(["/bin/bash", "-lc", "vllm serve m --max-model-len 4096 -tp 2"])
    assert (parsed.max_model_len, parsed.tensor_parallel_size) == (4096, 2)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3,'
          ' "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}'],
         SpeculativeConfig("eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", 3)),
        (["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens=5"],
         SpeculativeConfig("ngram", None, 5)),
        (["--speculative-model", "d", "--num-speculative-tokens", "4"],
         SpeculativeConfig(None, "d", 4)),
        (["--speculative-config", "None"], None),
    ],
)
def test_speculative_config(argv: list[str], expected: SpeculativeConfig | None) -> None:
    assert parse_vllm_args(argv).speculative == expected


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [
        (["--max-num-seqs", "many"], "--max-num-seqs", "not an integer"),
        (["--max-num-seqs", "0"], "--max-num-seqs", "at least 1"),
        (["--max-model-len", "$MAX_LEN"], "--max-model-len", "shell variables"),
        (["--max-model-len", "1.5K"], "--max-model-len", "not an integer"),
        (["--gpu-memory-utilization", "90"], "--gpu-memory-utilization", "(0, 1]"),
        (["--gpu-memory-utilization", "lots"], "--gpu-memory-utilization", "not a number"),
        (["--tensor-parallel-size", "two"], "--tensor-parallel-size", "not an integer"),
        (["--dtype", "int4"], "--dtype", "not one of"),
        (["--max-num-seqs"], "--max-num-seqs", "expects a value"),
        (["--speculative-config", "{method: eagle}"], "--speculative-config", "not valid JSON"),
        (["--speculative-config", "[1]"], "--speculative-config", "JSON object"),
        (["--speculative-config", '{"num_speculative_tokens": "x"}'],
         "--speculative-config num_speculative_tokens", "not an integer"),
        (["--enable-chunked-prefill=maybe"], "--enable-chunked-prefill", "not a boolean"),
    ],
)
def test_bad_values_name_the_flag(argv: list[str], flag: str, words: str) -> None:
    with pytest.raises(VllmArgsError) as raised:
        parse_vllm_args(argv)
    assert raised.value.flag == flag
    assert str(raised.value).startswith(flag + ":")
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("2M", 2 * 2**20),
     ("1g", 10**9)],
)
def test_human_readable_ints(text: str, value: int) -> None:
    assert parse_human_int(text) == value


FLAGS = st.sampled_from(["--max-num-seqs", "--max-model-len", "--tensor-parallel-size",
                         "--block-size"])


@given(flag=FLAGS, value=st.integers(min_value=1, max_value=10**6))
def test_space_and_equals_forms_agree(flag: str, value: int) -> None:
    assert parse_vllm_args([flag, str(value)]) == parse_vllm_args([f"{flag}={value}"])


WORDS = st.sampled_from(["--max-num-seqs", "--max-model-len", "-tp", "--dtype", "serve", "vllm",
                         "sh", "-c", "--speculative-config", "--no-enable-chunked-prefill",
                         "--enable-chunked-prefill", "--quantization", "auto", "32", "-1", "'",
                         '{"method": 1}', "--", "x=y", "--kv-cache-dtype", "--block-size"])


@given(argv=st.lists(WORDS | st.text(max_size=12), max_size=12))
def test_any_command_line_parses_or_names_a_flag(argv: list[str]) -> None:
    try:
        parse_vllm_args(argv)
    except VllmArgsError as e:
        assert e.flag.startswith("-")


def test_unbalanced_quotes_in_a_shell_wrapper() -> None:
    with pytest.raises(VllmArgsError, match="quotation"):
        parse_vllm_args(["sh", "-c", "vllm serve 'model --max-num-seqs 8"])
