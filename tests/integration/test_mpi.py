"""`mpirun -n N dsv4 ...`: DeepSeek-V4 split over processes (docs/distributed.md).

Every split must give the one-process results bit for bit: the logits of every
prompt position (`dsv4 logits --logits-out`, raw float32) and the generated
tokens (`dsv4 run`, greedy and sampled, with the MTP / DSpark draft on and
off), for every tiny model (window, CSA and HCA layers; hash and scored MoE)
and a synthetic 8-layer model split 4 ways; DeepSeek-V4.1's tiny models under
expert parallel. Then the traffic `dsv4 bench`
reports, expert parallel (the same checks), and the faults: a rank that cannot load, mismatched model files, bad
splits — every rank exits with the error, none hangs.

Open MPI comes from scripts/install-deps.sh (libopenmpi-dev, openmpi-bin); a
dsv4 built without it fails these tests with its "built without MPI" error.
"""
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import httpx
import pytest

from conftest import ROOT, _binary

DATA = ROOT / "tests/data/deepseek_v4"
DATA41 = ROOT / "tests/data/deepseek_v41"
# Every tiny model and its layer count (the most ranks it can take).
MODELS = {
    "swa_bf16": 4, "swa_fp8": 2, "swa_bf16_v2": 3, "mixed_mtp_bf16": 3, "long_hca128_bf16": 3,
    "dspark_mixed_bf16": 4, "dspark_swa_bf16": 3,
}
TIMEOUT = 300  # seconds; a hang fails the test instead of blocking the suite


def mpirun():
    path = shutil.which("mpirun")
    assert path, "mpirun not found: install openmpi-bin (scripts/install-deps.sh)"
    return path


def mpi_env():
    # Root may run Open MPI only when told so (CI containers run as root).
    return {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def run_dsv4(args, n=1):
    cmd = [_binary(), *args]
    if n > 1:
        cmd = [mpirun(), "--oversubscribe", "-n", str(n), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=mpi_env())


def ids_of(model_dir):
    return (model_dir / "input_ids.txt").read_text().split()


@pytest.fixture(scope="module")
def synth8(tmp_path_factory):
    """8 layers: 2 window, then CSA (4) and HCA (128) alternating; 1 hash layer; MTP."""
    out = tmp_path_factory.mktemp("mpi") / "synth8"
    r = run_dsv4(["synth-model", "--out", str(out), "--size-gb", "0.03", "--d-model", "256",
                  "--layers", "8", "--heads", "2", "--head-dim", "128", "--q-lora-rank", "128",
                  "--o-lora-rank", "128", "--o-groups", "2", "--vocab", "512",
                  "--index-heads", "2", "--index-head-dim", "64", "--index-topk", "4",
                  "--window", "8", "--moe-inter", "128", "--mtp-layers", "1",
                  "--hash-layers", "1"])
    assert r.returncode == 0, r.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["compress_ratios"][:8] == [0, 0, 4, 128, 4, 128, 4, 128]
    # A prompt past one HCA pool (128), so every layer kind compresses.
    rnd = random.Random(5)
    (out / "input_ids.txt").write_text(" ".join(["0"] + [str(rnd.randrange(1, 512))
                                                         for _ in range(160)]))
    return out


def logits(model_dir, tmp_path, n, *extra):
    out = tmp_path / f"logits_{n}_{'_'.join(extra)}.f32"
    r = run_dsv4(["logits", "--model", str(model_dir), "--prompt-ids", " ".join(ids_of(model_dir)),
                  "--threads", "1", "--logits-out", str(out), *extra], n)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_bit_identical(name, tmp_path):
    model = DATA / name
    single = logits(model, tmp_path, 1)
    assert len(single) == 4 * len(ids_of(model)) * json.loads(
        (model / "config.json").read_text())["vocab_size"]
    for n in sorted({2, MODELS[name]}):
        assert logits(model, tmp_path, n) == single, f"pipeline, {n} ranks"
    # Expert parallel: 8 routed experts per layer, split 2 and 4 ways.
    for n in (2, 4):
        assert logits(model, tmp_path, n, "--parallel", "expert") == single, f"expert, {n} ranks"


def test_synth_every_layer_kind_four_ranks(synth8, tmp_path):
    single = logits(synth8, tmp_path, 1)
    assert logits(synth8, tmp_path, 4) == single
    assert logits(synth8, tmp_path, 4, "--layers-split", "1,3,2,2") == single
    assert logits(synth8, tmp_path, 2, "--layers-split", "7,1") == single
    assert logits(synth8, tmp_path, 4, "--parallel", "expert") == single


# Micro-batched prefill (--pipeline-micro-batch): the prompt runs through the
# stages in pieces, the stages overlapping; sizes that divide the prompt and
# sizes that do not (the last piece shorter), down to one token.
MICRO = ("1", "3", "7", "16")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_micro_batched_logits_bit_identical(name, tmp_path):
    model = DATA / name
    single = logits(model, tmp_path, 1)
    for n in sorted({2, min(4, MODELS[name])}):
        for size in MICRO:
            assert logits(model, tmp_path, n, "--pipeline-micro-batch", size) == single, \
                f"{n} ranks, micro-batches of {size}"


def test_synth_micro_batched_four_ranks(synth8, tmp_path):
    """161 tokens past an HCA pool: auto (ceil(161 / N) tokens) and sizes that
    do not divide it, so pieces end at every kind of compression boundary."""
    single = logits(synth8, tmp_path, 1)
    for n in (2, 4):
        for size in ("auto", "5", "24", "50"):
            assert logits(synth8, tmp_path, n, "--pipeline-micro-batch", size) == single, \
                f"{n} ranks, micro-batches of {size}"
    assert logits(synth8, tmp_path, 4, "--layers-split", "1,3,2,2",
                  "--pipeline-micro-batch", "13") == single
    assert logits(synth8, tmp_path, 4, "--pipeline-micro-batch", "off") == single


# Pipeline and expert parallel together: 4 ranks as 2 stages of 2, each
# stage's routed experts split between its two ranks.
MIX = ("--parallel", "pipeline,expert", "--stages", "2")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pipeline_expert_mix_bit_identical(name, tmp_path):
    model = DATA / name
    single = logits(model, tmp_path, 1)
    assert logits(model, tmp_path, 4, *MIX) == single
    assert logits(model, tmp_path, 4, *MIX, "--pipeline-micro-batch", "3") == single


def test_synth_pipeline_expert_mix(synth8, tmp_path):
    single = logits(synth8, tmp_path, 1)
    assert logits(synth8, tmp_path, 4, *MIX) == single
    assert logits(synth8, tmp_path, 4, *MIX, "--layers-split", "3,5",
                  "--pipeline-micro-batch", "7") == single
    # The two ends: 4 stages of one rank (pipeline), one stage of 4 (expert).
    assert logits(synth8, tmp_path, 4, "--parallel", "pipeline,expert", "--stages", "4") == single
    assert logits(synth8, tmp_path, 4, "--parallel", "pipeline,expert", "--stages", "1") == single
    for extra in (["--temp", "0", "--speculative", "3"], ["--temp", "0.9", "--seed", "3"]):
        assert generate(synth8, 4, *MIX, *extra) == generate(synth8, 1, *extra)


def test_pipeline_expert_mix_dspark_tokens():
    extra = ["--temp", "0", "--speculative", "4"]
    assert generate(DATA / "dspark_mixed_bf16", 4, *MIX, *extra) == \
        generate(DATA / "dspark_mixed_bf16", 1, *extra)


def test_pipeline_expert_mix_bad_stages():
    r = run_dsv4(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", "0 1 2",
                  "--parallel", "pipeline,expert", "--stages", "3"], 4)
    fails(r, "rank 0 cannot take its part: --parallel pipeline,expert: --stages 3 does not "
             "divide the job's 4 ranks into stages of equal size", "e.g. -n 4 --stages 2")
    r = run_dsv4(["logits", "--model", str(DATA / "swa_fp8"), "--prompt-ids", "0 1 2",
                  "--parallel", "pipeline,expert", "--stages", "2", "--layers-split", "1,1,1"], 4)
    fails(r, "--parallel pipeline,expert, 2 stages: --layers-split '1,1,1' gives 3 ranks")


def test_bad_micro_batch_is_refused():
    r = run_dsv4(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", "0 1 2",
                  "--pipeline-micro-batch", "0"])
    fails(r, "'0' is not a token count (give TOKENS >= 1, auto or off)")


def generate(model_dir, n, *extra):
    r = run_dsv4(["run", "--model", str(model_dir), "--prompt-ids", " ".join(ids_of(model_dir)),
                  "-n", "24", "--print-ids", "--threads", "1", *extra], n)
    assert r.returncode == 0, r.stderr
    tokens = r.stdout.split()
    assert tokens and all(t.isdigit() for t in tokens), r.stdout
    return tokens


@pytest.mark.parametrize("name,extra", [
    ("mixed_mtp_bf16", ["--temp", "0"]),
    ("mixed_mtp_bf16", ["--temp", "0", "--speculative", "3"]),
    ("mixed_mtp_bf16", ["--temp", "0.9", "--seed", "7", "--speculative", "2"]),
    ("dspark_mixed_bf16", ["--temp", "0"]),
    ("dspark_mixed_bf16", ["--temp", "0", "--speculative", "4"]),
    ("dspark_mixed_bf16", ["--temp", "0", "--speculative", "4", "--pipeline-micro-batch", "5"]),
    ("long_hca128_bf16", ["--temp", "0.8", "--seed", "3"]),
])
def test_run_tokens_identical(name, extra):
    single = generate(DATA / name, 1, *extra)
    for n in sorted({2, MODELS[name]}):
        assert generate(DATA / name, n, *extra) == single, f"pipeline, {n} ranks"
    assert generate(DATA / name, 3, "--parallel", "expert", *extra) == single, "expert"


def test_synth_run_with_mtp_four_ranks(synth8):
    for extra in (["--temp", "0"], ["--temp", "0", "--speculative", "3"]):
        single = generate(synth8, 1, *extra)
        assert generate(synth8, 4, *extra) == single
        assert generate(synth8, 4, "--pipeline-micro-batch", "7", *extra) == single
        assert generate(synth8, 4, "--parallel", "expert", *extra) == single


@pytest.mark.parametrize("name", ["csa2_bf16", "csa2_fp8"])
def test_v41_expert_parallel_bit_identical(name, tmp_path):
    """DeepSeek-V4.1 (CSA2, Engram): expert parallel gives one process's logits and tokens."""
    model = DATA41 / name
    single = logits(model, tmp_path, 1)
    for n in (2, 3):
        assert logits(model, tmp_path, n, "--parallel", "expert") == single, f"{n} ranks"
    for extra in (["--temp", "0"], ["--temp", "0.9", "--seed", "5"]):
        assert generate(model, 3, "--parallel", "expert", *extra) == generate(model, 1, *extra)


def test_v41_cannot_be_split_by_layers():
    model = DATA41 / "csa2_bf16"
    r = run_dsv4(["logits", "--model", str(model), "--prompt-ids", "0 1 2"], 2)
    fails(r, "rank 0 cannot take its part: DeepSeek-V4.1 cannot be split by layers",
          "use --parallel expert")


def test_bench_reports_traffic_per_rank():
    """Decode: each rank sends one token's residual streams [C, D] fp32 once per
    token; rank 0 also broadcasts one 64-byte command (the token inline) to
    each other rank."""
    model = DATA / "mixed_mtp_bf16"
    config = json.loads((model / "config.json").read_text())
    row = 4 * config["hc_mult"] * config["hidden_size"]
    n = 3
    r = run_dsv4(["bench", "--model", str(model), "--prompt-len", "16", "--gen", "8",
                  "--repeat", "2", "--probe-mib", "0", "--threads", "1"], n)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("mpirun rank ")]
    assert len(lines) == n, r.stdout
    decode = [l.split("decode ")[1].split() for l in lines]
    assert decode[0][0] == str(row + 64 * (n - 1)) and decode[0][3] == f"{1 + (n - 1):.3f}"
    for d in decode[1:]:
        assert d[0] == str(row) and d[3] == "1.000"
    summary = r.stdout.strip().splitlines()[-1]
    assert f"ranks={n}" in summary and f"rank_decode_bytes_per_token={row + 64 * (n - 1)}" in summary


def test_bench_reports_expert_parallel_traffic():
    """Expert parallel, decode: per MoE layer each rank sends the output rows
    [D] fp32 of the token's experts it owns to every other rank (one all-gather
    message to each); together k rows per layer."""
    model = DATA / "mixed_mtp_bf16"
    config = json.loads((model / "config.json").read_text())
    layers, k, D = config["num_hidden_layers"], config["num_experts_per_tok"], config["hidden_size"]
    r = run_dsv4(["bench", "--model", str(model), "--parallel", "expert", "--prompt-len", "16",
                  "--gen", "8", "--repeat", "2", "--probe-mib", "0", "--threads", "1"], 2)
    assert r.returncode == 0, r.stderr
    decode = [l.split("decode ")[1].split() for l in r.stdout.splitlines()
              if l.startswith("mpirun rank ")]
    assert len(decode) == 2, r.stdout
    # Rank 0's also holds its one 64-byte command broadcast per token.
    assert int(decode[0][0]) - 64 + int(decode[1][0]) == layers * k * D * 4
    assert decode[0][3] == f"{layers + 1:.3f}" and decode[1][3] == f"{layers:.3f}"


def serve_completions(n, prompts, *extra):
    """Starts `dsv4 serve` (under mpirun when n > 1), sends the prompts at once
    (batched by the engine: ForwardBatch), returns their token ids."""
    cmd = [_binary(), "serve", "--model", str(DATA / "mixed_mtp_bf16"), "--host", "127.0.0.1",
           "--port", "0", "--threads", "1", "--max-sequences", "2", *extra]
    if n > 1:
        cmd = [mpirun(), "--oversubscribe", "-n", str(n), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=mpi_env())
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "listening on http://127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split()[0])
        assert port, proc.stderr.read() if proc.poll() is not None else "no port"
        url = f"http://127.0.0.1:{port}/v1/completions"
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            futures = [pool.submit(httpx.post, url, timeout=120, json={
                "model": "mixed_mtp_bf16", "prompt": p, "max_tokens": 12, "temperature": 0, "logprobs": 2})
                for p in prompts]
            results = [f.result() for f in futures]
        for res in results:
            assert res.status_code == 200, res.text
        return [res.json()["choices"][0]["logprobs"] for res in results]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_batched_identical():
    ids = [int(t) for t in ids_of(DATA / "mixed_mtp_bf16")]
    prompts = [ids[:20], ids[5:33]]
    single = serve_completions(1, prompts)
    assert serve_completions(2, prompts) == single
    assert serve_completions(2, prompts, "--parallel", "expert") == single
    assert serve_completions(4, prompts, *MIX) == single


# ---- Faults: every rank exits with the error (exit code 2), none hangs ----

def fails(r, *needles):
    assert r.returncode != 0, r.stdout
    for needle in needles:
        assert needle in r.stderr, r.stderr


def mpmd(first, second):
    """rank 0 runs `first`, rank 1 `second` (Open MPI's MPMD syntax)."""
    cmd = [mpirun(), "--oversubscribe", "-n", "1", _binary(), *first, ":", "-n", "1", _binary(),
           *second]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=mpi_env())


def test_rank_that_cannot_load_names_itself(tmp_path):
    ids = " ".join(ids_of(DATA / "swa_bf16"))
    r = mpmd(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", ids],
             ["logits", "--model", str(tmp_path / "missing"), "--prompt-ids", ids])
    fails(r, "rank 1 could not load its part", "no such file or directory")


def test_mismatched_model_files_are_detected(tmp_path):
    copy = tmp_path / "swa_bf16"
    shutil.copytree(DATA / "swa_bf16", copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one weight bit in the last MiB
    (copy / "model.safetensors").write_bytes(bytes(data))
    ids = " ".join(ids_of(DATA / "swa_bf16"))
    r = mpmd(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", ids],
             ["logits", "--model", str(copy), "--prompt-ids", ids])
    fails(r, "rank 1's copy of", "model.safetensors differs from rank 0's")
    r = mpmd(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", ids],
             ["logits", "--model", str(DATA / "swa_bf16_v2"), "--prompt-ids", ids])
    fails(r, "rank 1's copy of", "differs from rank 0's")


def test_mismatched_options_are_detected():
    ids = " ".join(ids_of(DATA / "swa_bf16"))
    r = mpmd(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", ids],
             ["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", ids, "--swa-full"])
    fails(r, "rank 1 loaded the model with other options than rank 0")


@pytest.mark.parametrize("n,args,needles", [
    (2, ["--layers-split", "1,1"], ["--layers-split '1,1' gives 2 ranks 2 layers",
                                    "the model 4 layers"]),
    (2, ["--layers-split", "4,0"], ["'0' is not a layer count"]),
    (3, ["--layers-split", "2,2"], ["gives 2 ranks 4 layers; the job has 3 ranks"]),
])
def test_bad_splits_are_refused(n, args, needles):
    r = run_dsv4(["logits", "--model", str(DATA / "swa_bf16"), "--prompt-ids", "0 1 2", *args], n)
    fails(r, *needles)


def test_too_many_ranks_and_unsplittable_models():
    r = run_dsv4(["logits", "--model", str(DATA / "swa_fp8"), "--prompt-ids", "0 1"], 3)
    fails(r, "rank 0 cannot take its part: 3 ranks but the model has only 2 layers to split")
    r = run_dsv4(["logits", "--model", "stories260K", "--prompt-ids", "1 2"], 2)  # llama2.c
    fails(r, "cannot be split over processes")


def test_runtime_options_are_refused_not_ignored():
    r = run_dsv4(["run", "--model", str(DATA / "swa_bf16"), "--prompt-ids", "0 1 2", "-n", "2",
                  "--expert-mask", "0,1,2,3"], 2)
    fails(r, "--expert-mask is not offered for a model split over processes")


def parent_of(pid):
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def rank_process(root, rank):
    """The dsv4 process of `rank` among the descendants of `root` (mpirun)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() not in env:
                continue
            p = int(pid)
            while p > 1 and p != root:
                p = parent_of(p)
        except OSError:
            continue
        if p == root:
            return int(pid)
    return None


def test_a_rank_that_dies_ends_the_job():
    """kill -9 of rank 1 while the server waits: mpirun takes the job down."""
    cmd = [mpirun(), "--oversubscribe", "-n", "2", _binary(), "serve", "--model",
           str(DATA / "swa_bf16"), "--host", "127.0.0.1", "--port", "0", "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=mpi_env())
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
        assert "listening on" in line, proc.stderr.read()
        victim = rank_process(proc.pid, 1)
        assert victim, "rank 1 not found"
        os.kill(victim, signal.SIGKILL)
        proc.wait(timeout=60)  # no hang: the whole job ends
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("n,parallel,awaited", [
    (2, ["--parallel", "pipeline"], "rank 1's residual streams after layers [2, 4) (--mpi-timeout)"),
    (2, ["--parallel", "expert"], "rank 1's routed expert outputs of layer 0 (--mpi-timeout)"),
    (4, list(MIX), "rank 1's routed expert outputs of layer 0 (--mpi-timeout)"),
])
def test_a_stopped_rank_times_out(n, parallel, awaited):
    """kill -STOP of rank 1 (stopped, not dead: MPI alone would wait forever).
    An idle server waits for requests without a timeout; the request that
    needs rank 1 ends every rank after --mpi-timeout with the waiting rank,
    the rank awaited and what it waited for on stderr."""
    cmd = [mpirun(), "--oversubscribe", "-n", str(n), _binary(), "serve", "--model",
           str(DATA / "swa_bf16"), "--host", "127.0.0.1", "--port", "0", "--threads", "1",
           *parallel, "--mpi-timeout", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=mpi_env())
    victim = None
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
        assert "listening on" in line, proc.stderr.read()
        url = "http://127.0.0.1:" + line.split("127.0.0.1:")[1].split()[0] + "/v1/completions"
        body = {"model": "swa_bf16", "prompt": [0, 5, 9, 17, 3], "max_tokens": 4,
                "temperature": 0}
        time.sleep(4)  # idle past the timeout: the workers wait for the next request
        assert httpx.post(url, timeout=60, json=body).status_code == 200
        victim = rank_process(proc.pid, 1)
        assert victim, "rank 1 not found"
        os.kill(victim, signal.SIGSTOP)
        started = time.monotonic()
        try:
            httpx.post(url, timeout=60, json=body)
        except httpx.HTTPError:
            pass  # the server ends mid-request
        proc.wait(timeout=60)  # no hang: the whole job ends
        assert time.monotonic() - started < 60
        stderr = proc.stderr.read()
        assert proc.returncode != 0
        assert "dsv4: error: rank 0 waited 2 s for " + awaited in stderr, stderr
        assert "dsv4: hint: rank 1 is stopped, hung or slower than the timeout allows" in stderr, \
            stderr
    finally:
        if victim is not None:
            try:
                os.kill(victim, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
