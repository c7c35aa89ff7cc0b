"""irsandbox.podspec: vLLM args, annotations, label sanitising, the simulator command line."""

from __future__ import annotations

import json

import pytest

from irsandbox import podspec
from irsandbox.podspec import Behaviour, VLLMArgs


def pod(containers, annotations=None, labels=None, name="chat-abc123-5d9f7-xk2p4", ns="serving"):
    return {
        "metadata": {"name": name, "namespace": ns, "uid": "u1",
                     "annotations": annotations or {}, "labels": labels or {}},
        "spec": {"containers": containers, "nodeName": "kwok-node-0"},
    }


@pytest.mark.parametrize(
    ("argv", "model", "served"),
    [
        (["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "32"],
         "meta-llama/Llama-3.1-8B-Instruct", ()),
        (["--model=m1", "--served-model-name", "a", "b", "--port", "8000"], "m1", ("a", "b")),
        (["vllm", "serve", "Qwen/Qwen2-7B", "--served-model-name=qwen"], "Qwen/Qwen2-7B",
         ("qwen",)),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x",
          "--enforce-eager", "--served-model-name", "y"], "x", ("y",)),
    ],
)
def test_parse_vllm_args(argv, model, served):
    args = podspec.parse_vllm_args(argv)
    assert args.model == model
    assert args.served_model_names == served
    assert args.public_name == (served[0] if served else model)


def test_parse_vllm_args_numbers():
    args = podspec.parse_vllm_args(
        ["--model", "m", "--max-num-seqs", "32", "--max-model-len=8192", "--port", "8000",
         "--max-num-batched-tokens", "bogus"])
    assert (args.max_num_seqs, args.max_model_len, args.port) == (32, 8192, 8000)


def test_find_vllm_container_by_name_or_model_flag():
    by_name = pod([{"name": "sidecar", "args": ["x"]}, {"name": "vllm", "args": []}])
    assert podspec.find_vllm_container(by_name)["name"] == "vllm"
    by_flag = pod([{"name": "server", "command": ["vllm", "serve"], "args": ["--model", "m"]}])
    assert podspec.find_vllm_container(by_flag)["name"] == "server"
    assert podspec.vllm_args_of(by_flag).model == "m"
    assert podspec.find_vllm_container(pod([{"name": "nginx", "args": ["-g"]}])) is None
    # a vllm container without a model still gets a simulator, under a placeholder name
    assert podspec.vllm_args_of(pod([{"name": "vllm"}])).model == "vllm-model"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("app", "app"),
        ("app.kubernetes.io/name", "app_kubernetes_io_name"),
        ("rollouts.inference.dev/revision", "rollouts_inference_dev_revision"),
        ("pod-template-hash", "pod_template_hash"),
        ("9lives", "_9lives"),
        ("ünïcode", "_n_code"),
    ],
)
def test_sanitize_label_name(key, expected):
    assert podspec.sanitize_label_name(key) == expected


def test_behaviour_from_annotations():
    b = podspec.behaviour_of({
        podspec.ANN_TTFT_MS: "250", podspec.ANN_ITL_MS: "12.5", podspec.ANN_FAILURE_RATE: "0.4",
        podspec.ANN_STARTUP_SECONDS: "20", podspec.ANN_BUSINESS_FAIL_RATE: "8",
    })
    assert (b.ttft_ms, b.itl_ms, b.failure_rate, b.startup_seconds, b.business_fail_rate) == (
        250.0, 12.5, 1, 20.0, 8.0)
    assert b.failure_types == ("server_error",)
    assert b.mode == "echo" and not b.problems


def test_behaviour_defaults_and_bad_values_are_ignored_not_fatal():
    assert podspec.behaviour_of(None) == Behaviour()
    b = podspec.behaviour_of({podspec.ANN_TTFT_MS: "fast", podspec.ANN_FAILURE_RATE: "150",
                              podspec.ANN_FAILURE_TYPES: "oops", podspec.ANN_MODE: "chaos"})
    assert b == Behaviour()
    assert len(b.problems) == 4


def test_sim_command():
    args = VLLMArgs(model="meta-llama/Llama-3.1-8B-Instruct", served_model_names=("llama",),
                    max_num_seqs=32, max_model_len=8192)
    b = Behaviour(ttft_ms=250, itl_ms=12.5, failure_rate=5, startup_seconds=20)
    cmd = podspec.sim_command("/bin/sim", 21001, args, b)
    assert cmd[:3] == ["/bin/sim", "--port=21001", "--model=meta-llama/Llama-3.1-8B-Instruct"]
    for flag in ("--mode=echo", "--time-to-first-token=250ms", "--inter-token-latency=12.5ms",
                 "--failure-injection-rate=5", "--max-num-seqs=32", "--max-model-len=8192",
                 "--startup-duration=20s", "--force-dummy-tokenizer"):
        assert flag in cmd
    i = cmd.index("--served-model-name")
    assert cmd[i + 1] == "llama" and cmd[i + 2].startswith("--")
    j = cmd.index("--failure-types")
    assert cmd[j + 1] == "server_error"
    # defaults: vLLM's max-num-seqs, no startup delay
    plain = podspec.sim_command("/bin/sim", 1, VLLMArgs(model="m"), Behaviour())
    assert "--max-num-seqs=256" in plain
    assert not any(a.startswith("--startup-duration") for a in plain)


def test_admin_config_delta():
    old = Behaviour()
    new = Behaviour(ttft_ms=500, failure_rate=10, failure_types=("rate_limit",))
    assert podspec.admin_config_delta(old, new) == {
        "time-to-first-token": "500ms", "failure-injection-rate": 10,
        "failure-types": ["rate_limit"]}
    assert podspec.admin_config_delta(old, old) == {}
    assert podspec.needs_restart(old, Behaviour(mode="random"))
    # every pod has a shim: adding or removing business-fail-rate is a live change
    assert not podspec.needs_restart(old, Behaviour(business_fail_rate=0))
    assert not podspec.needs_restart(Behaviour(business_fail_rate=5), old)
    assert not podspec.needs_restart(Behaviour(business_fail_rate=0),
                                     Behaviour(business_fail_rate=9))


def test_revision_of_labels_then_name():
    assert podspec.revision_of({podspec.LABEL_ROLLOUT: "chat", podspec.LABEL_REVISION: "7d1a"},
                               "whatever") == ("chat", "7d1a")
    assert podspec.revision_of({}, "llama-chat-7d1a-5d9f7c-xk2p4") == ("llama-chat", "7d1a")
    assert podspec.revision_of({}, "solo") == ("", "")


def test_pod_ready_and_condition():
    p = pod([{"name": "vllm"}])
    assert not podspec.is_pod_ready(p)
    p["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert podspec.is_pod_ready(p)
    assert podspec.condition(p, "Ready")["status"] == "True"
    assert podspec.pod_key(p) == "serving/chat-abc123-5d9f7-xk2p4"


def test_lora_flags_reach_the_simulator():
    args = podspec.parse_vllm_args([
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--enable-lora", "--max-loras", "2",
        "--lora-modules", "support=/adapters/support/v1",
        '{"name": "code", "path": "/adapters/code/v3"}', "--max-lora-rank", "16"])
    assert args.enable_lora and args.max_loras == 2
    assert args.lora_modules == ("support=/adapters/support/v1",
                                 '{"name": "code", "path": "/adapters/code/v3"}')
    cmd = podspec.sim_command("/bin/sim", 1, args, Behaviour())
    assert "--max-loras=2" in cmd
    i = cmd.index("--lora-modules")
    assert [json.loads(m) for m in cmd[i + 1:i + 3]] == [
        {"name": "support", "path": "/adapters/support/v1"},
        {"name": "code", "path": "/adapters/code/v3"}]
    # without --enable-lora vLLM serves no adapter: neither does the simulator
    plain = podspec.sim_command("/bin/sim", 1, podspec.parse_vllm_args(
        ["--model", "m", "--lora-modules", "a=/a"]), Behaviour())
    assert "--lora-modules" not in plain and not any(a.startswith("--max-loras") for a in plain)
