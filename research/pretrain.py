"""Prototype: pretrain a tiny spatial Qwen2.5-VL base (issue 8). To be moved into nbs/41_pretraining.ipynb."""
import json, math, os, sys, time
from dataclasses import dataclass, asdict, field, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from consistency_amp.training.models import load_processor, TINY_MODEL
from consistency_amp.training.tiny_models import QWEN2_5_VL_SPECIAL_TOKENS, Qwen2_5_VLImageOnlyProcessor, train_tiny_tokenizer
from consistency_amp.world.prompts import make_prompt, load_rgb, draw_markers, prompt_text, prompt_messages
from consistency_amp.world.synthetic import default_world, SyntheticConfig
from consistency_amp.world.task_splits import build_task_splits
from consistency_amp.world.tasks import BOOLEAN_TASKS, Question, ground_truth, task_values, TEMPLATES, RELATION_PHRASES
from consistency_amp.world.transforms import apply_transform, Transform, sample_transform
from consistency_amp.reward.verifiers import parse_answer
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, GenerationConfig, Qwen2VLImageProcessorPil
from trl.chat_template_utils import qwen2_5_vl_chat_template

THINK_NAMES = {"orientation": "x", "depth": "depth", "size": "size", "relative_distance": "distance"}


@dataclass
class Recipe:
    world_seed: int = 7919
    images_per_source: int = 600
    max_per_image: int = 3
    sources: tuple = ("SUNRGBD", "KITTI")
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    vision_depth: int = 2
    vision_hidden: int = 64
    max_pixels: int = 28 * 28 * 12
    steps: int = 300
    batch: int = 64
    lr: float = 1e-3
    warmup: int = 20
    seed: int = 0
    think: str = "values"       # values | none
    fixed_wording_fraction: float = 0.0
    threads: int = 1
    out: str = "out"
    tasks: tuple = BOOLEAN_TASKS
    variants: int = 2


def model_config(r: Recipe, tok) -> Qwen2_5_VLConfig:
    ids = dict(zip(QWEN2_5_VL_SPECIAL_TOKENS, tok.convert_tokens_to_ids(list(QWEN2_5_VL_SPECIAL_TOKENS))))
    head_dim = r.hidden // r.heads
    half = head_dim // 2
    sec = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text = dict(hidden_size=r.hidden, intermediate_size=2 * r.hidden, num_hidden_layers=r.layers,
                num_attention_heads=r.heads, num_key_value_heads=max(1, r.heads // 2), max_position_embeddings=32768,
                rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": sec},
                vocab_size=-(-len(tok) // 64) * 64, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    vision = dict(depth=r.vision_depth, hidden_size=r.vision_hidden, intermediate_size=2 * r.vision_hidden,
                  num_heads=max(1, r.vision_hidden // 32), out_hidden_size=r.hidden, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, window_size=448 * 4, fullatt_block_indexes=list(range(r.vision_depth)),
                  tokens_per_second=2)
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def make_processor(r: Recipe, tok):
    ip = Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=r.max_pixels, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)
    return Qwen2_5_VLImageOnlyProcessor(ip, tok, chat_template=qwen2_5_vl_chat_template)


from consistency_amp.world.prompts import _visible_box


def cue_values(scene, q: Question):
    "What the image shows of the compared quantity: 2D cues of the marked boxes, in question order (IDX0, IDX1)."
    W, H = scene.width, scene.height
    def box(i):
        x1, y1, x2, y2 = _visible_box(scene, i)
        return x1 / W, y1 / H, x2 / W, y2 / H
    a, b = (box(i) for i in q.idx_ids)
    if q.task == "orientation": return (a[0] + a[2]) / 2, (b[0] + b[2]) / 2
    if q.task == "depth": return -a[3], -b[3]                    # lower bottom edge = closer
    if q.task == "size": return (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
    c = box(q.anchor_id); cc = ((c[0] + c[2]) / 2, (c[1] + c[3]) / 2)
    d = lambda k: math.hypot((k[0] + k[2]) / 2 - cc[0], (k[1] + k[3]) / 2 - cc[1])
    return d(a), d(b)


VALUES = task_values


def quantiles(examples_by_task):
    "Decile edges of each task's compared quantity over the pretraining examples."
    edges = {}
    for task, exs in examples_by_task.items():
        vals = np.concatenate([np.asarray(VALUES(e.scene, e.question)) for e in exs])
        edges[task] = np.quantile(vals, np.linspace(0.1, 0.9, 9)).tolist()
    return edges


def think_text(scene, q: Question, edges) -> str:
    v0, v1 = VALUES(scene, q)
    e = edges[q.task]
    d0, d1 = int(np.searchsorted(e, v0)), int(np.searchsorted(e, v1))
    name = THINK_NAMES[q.task]
    return f"{name} {d0} vs {d1}"


FACT_WORDS = {"orientation": "left", "depth": "closer", "size": "bigger", "relative_distance": "closer"}


def fact_text(scene, q: Question) -> str:
    "The wording-free visible fact, in listing (marker colour) order: which listed object is left/closer/bigger."
    first, second = (2, 3) if q.task == "relative_distance" else (1, 2)
    canon = replace(q, relation=0, order=(first, second))
    winner = first if ground_truth(scene, canon) else second
    return f"object {winner} {FACT_WORDS[q.task]}"


WORD0 = {t: RELATION_PHRASES[t][0].split()[0] for t in RELATION_PHRASES}


def scaffold_text(scene, q: Question) -> str:
    "`W word0; S REL`: the perceived winner of the canonical relation, then the question's subject and relation word."
    first, second = (2, 3) if q.task == "relative_distance" else (1, 2)
    winner = first if ground_truth(scene, replace(q, relation=0, order=(first, second))) else second
    rel = RELATION_PHRASES[q.task][q.relation].split()[0]
    return f"{winner} {WORD0[q.task]}; {q.order[0]} {rel}"


def claim_text(scene, q: Question) -> str:
    "`word0 W; word0 C`: the perceived winner of the canonical relation, then the object the question claims is it."
    first, second = (2, 3) if q.task == "relative_distance" else (1, 2)
    winner = first if ground_truth(scene, replace(q, relation=0, order=(first, second))) else second
    claimed = q.order[0] if q.relation == 0 else q.order[1]
    return f"{WORD0[q.task]} {winner}; {WORD0[q.task]} {claimed}"


def completion(scene, q, edges, think="values") -> str:
    if think == "claim":
        return f"<think>{claim_text(scene, q)}</think><answer>{'True' if ground_truth(scene, q) else 'False'}</answer>"
    if think == "scaffold":
        return f"<think>{scaffold_text(scene, q)}</think><answer>{'True' if ground_truth(scene, q) else 'False'}</answer>"
    if think == "facts":
        return f"<think>{fact_text(scene, q)}</think><answer>{'True' if ground_truth(scene, q) else 'False'}</answer>"
    ans = "True" if ground_truth(scene, q) else "False"
    t = think_text(scene, q, edges) if think in ("values", "cues") else ""
    return f"<think>{t}</think><answer>{ans}</answer>"


def reword(rng, q: Question, fixed=False) -> Question:
    if fixed: return replace(q, template=0, relation=0, order=(2, 3) if q.task == "relative_distance" else (1, 2))
    order = ((2, 3), (3, 2))[rng.integers(2)] if q.task == "relative_distance" else ((1, 2), (2, 1))[rng.integers(2)]
    return replace(q, template=int(rng.integers(len(TEMPLATES[q.task]))), relation=int(rng.integers(2)), order=order)


class Pool:
    "Pretraining items: per example a few marked image variants (pixel values precomputed) and the scene each shows."
    def __init__(self, examples, processor, rng, variants=2, aux=False):
        self.items, self.aux = [], []
        ip = processor.image_processor
        for e in examples:
            image = load_rgb(e.scene)
            for v in range(variants):
                if v == 0: T = Transform()
                else: T = Transform(flip=True) if v == 1 else sample_transform(rng, e.scene, e.question, p=0.5)
                # keep only image transforms: the wording is redrawn per sample
                T = Transform(flip=T.flip, crop=T.crop, jitter=T.jitter)
                scene_t, image_t, q_t = apply_transform(e.scene, image, e.question, T)
                marked = draw_markers(image_t, scene_t, q_t)
                px = ip(images=[marked], return_tensors="pt")
                self.items.append((scene_t, q_t, px["pixel_values"], px["image_grid_thw"]))
                if aux: self.aux.append(aux_targets(scene_t, q_t, px["image_grid_thw"]))


def batch_inputs(items, processor, rng, edges, r: Recipe, train=True, reword_fn=True):
    tok = processor.tokenizer
    texts, pvs, grids, prompt_lens = [], [], [], []
    for scene, q, pv, grid in items:
        q2 = reword(rng, q, rng.random() < r.fixed_wording_fraction) if reword_fn else q
        msgs = prompt_messages(prompt_text(scene, q2))
        prompt = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        n = int(grid.prod()) // 4
        prompt = prompt.replace("<|image_pad|>", "<|image_pad|>" * n)
        full = prompt + completion(scene, q2, edges, r.think) + "<|im_end|>"
        texts.append(full); prompt_lens.append(len(tok(prompt)["input_ids"])); pvs.append(pv); grids.append(grid)
    enc = tok(texts, padding=True, return_tensors="pt")
    labels = enc["input_ids"].clone()
    for i, n in enumerate(prompt_lens): labels[i, :n] = -100
    labels[enc["attention_mask"] == 0] = -100
    return dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], pixel_values=torch.cat(pvs),
                image_grid_thw=torch.cat(grids), labels=labels)


def greedy_eval(model, processor, examples, edges, r, max_new=24, bs=64, forced=None):
    "Per-example record: cell (relation, order), prediction, truth."
    from consistency_amp.evaluation.decoders import GreedyDecoder
    dec = GreedyDecoder(model, processor, max_new_tokens=max_new)
    recs = []
    for i in range(0, len(examples), bs):
        chunk = examples[i:i + bs]
        rows = []
        for e in chunk:
            q = e.question if forced is None else replace(e.question, **forced)
            p = make_prompt(e.scene, load_rgb(e.scene), q)
            rows.append(dict(prompt=p.messages, image=p.image, q=q, e=e))
        outs = dec.complete(rows)
        for row, text in zip(rows, outs):
            a = parse_answer(text, "boolean")
            recs.append(dict(task=row["e"].task, rel=row["q"].relation, order=row["q"].order, pred=a,
                             truth=ground_truth(row["e"].scene, row["q"]), text=text))
    return recs


def summarise(recs):
    out = {}
    for task in sorted({r["task"] for r in recs}):
        rs = [r for r in recs if r["task"] == task]
        acc = np.mean([r["pred"] == r["truth"] for r in rs]); fmt = np.mean([r["pred"] is not None for r in rs])
        cells = {}
        for rel in (0, 1):
            for order in sorted({r["order"] for r in rs}):
                c = [r for r in rs if r["rel"] == rel and r["order"] == order]
                if c: cells[f"r{rel}{order}"] = (round(float(np.mean([r["pred"] == r["truth"] for r in c])), 2),
                                                 round(float(np.mean([r["pred"] is True for r in c])), 2), len(c))
        out[task] = dict(acc=round(float(acc), 3), fmt=round(float(fmt), 3), n=len(rs), cells=cells)
    out["mean_acc"] = round(float(np.mean([v["acc"] for k, v in out.items() if isinstance(v, dict)])), 3)
    return out


def main(**kw):
    r = Recipe(**kw)
    global VALUES
    VALUES = cue_values if r.think == "cues" else task_values
    torch.set_num_threads(r.threads)
    t0 = time.time()
    world = default_world(SyntheticConfig(seed=r.world_seed, n_images_per_split={"train": r.images_per_source},
                                          sources=r.sources))
    tasks = tuple(r.tasks)
    splits = build_task_splits(world, tasks=tasks, sources=r.sources, max_per_image=r.max_per_image, seed=r.seed)
    train = {t: [e for s in r.sources for e in splits[(t, s)].train] for t in tasks}
    val = [e for t in tasks for s in r.sources for e in splits[(t, s)].test]
    edges = quantiles(train)
    print("world+examples", round(time.time() - t0, 1), {t: len(v) for t, v in train.items()}, "val", len(val), flush=True)
    tok = train_tiny_tokenizer()
    processor = make_processor(r, tok)
    rng = np.random.default_rng(r.seed)
    t0 = time.time()
    pool = Pool([e for t in tasks for e in train[t]], processor, rng, variants=r.variants)
    print("pool", len(pool.items), round(time.time() - t0, 1), "tokens/img", int(pool.items[0][3].prod()) // 4, flush=True)
    torch.manual_seed(r.seed)
    model = Qwen2_5_VLForConditionalGeneration(model_config(r, tok))
    model.generation_config = GenerationConfig(bos_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
                                               eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")])
    print("params", sum(p.numel() for p in model.parameters()), flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / r.warmup) * 0.5 * (1 + math.cos(math.pi * min(s, r.steps) / r.steps)))
    model.train(); t0 = time.time()
    for step in range(r.steps):
        idx = rng.integers(len(pool.items), size=r.batch)
        b = batch_inputs([pool.items[i] for i in idx], processor, rng, edges, r)
        loss = model(**b).loss
        loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad()
        if step % 25 == 0 or step == r.steps - 1:
            print(f"step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    out = Path(r.out); out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out); processor.save_pretrained(out); (out / "edges.json").write_text(json.dumps(edges))
    rng2 = np.random.default_rng(1); evx = [val[i] for i in rng2.permutation(len(val))[:600]]
    recs = greedy_eval(model, processor, evx, edges, r, max_new=32)
    s = summarise(recs)
    print(json.dumps(s), flush=True)
    print("examples:", [x["text"] for x in recs[:4]])
    print("diversity", json.dumps(sampled_diversity(model, processor, evx[:96])), flush=True)
    return model, processor, s


def sampled_diversity(model, processor, examples, K=8, max_new=32):
    "At T=1: format rate and share of groups of K holding both answers."
    from consistency_amp.evaluation.decoders import GreedyDecoder
    dec = GreedyDecoder(model, processor, max_new_tokens=max_new)
    both, fmt, n = 0, 0, 0
    for i in range(0, len(examples), 8):
        rows = []
        for e in examples[i:i + 8]:
            p = make_prompt(e.scene, load_rgb(e.scene), e.question)
            rows += [dict(prompt=p.messages, image=p.image)] * K
        inputs = dec.inputs(rows)
        with torch.inference_mode():
            o = model.generate(**inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new,
                               pad_token_id=dec.pad_token_id)
        texts = processor.batch_decode(o[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        answers = [parse_answer(t, "boolean") for t in texts]
        fmt += sum(a is not None for a in answers)
        for g in range(0, len(answers), K):
            both += len({a for a in answers[g:g + K] if a is not None}) == 2; n += 1
    return dict(format_rate=fmt / (n * K), both_answers=both / n, groups=n)


if __name__ == "__main__":
    kw = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    main(**kw)


# ---- dense auxiliary vision targets (perception first; the head is discarded after pretraining) ----
AUX_TASKS = ("orientation", "depth", "size", "relative_distance")
AUX_CHANNELS = 3 + len(AUX_TASKS) + 2     # marker colour present x3, canonical fact per task, row, col


def aux_targets(scene_t, q_t, grid) -> tuple[np.ndarray, np.ndarray]:
    "Per merged token: (targets (n, C), mask (n, C)) — colour presence, the example's canonical fact, row/col."
    from consistency_amp.world.prompts import MARKER_RGB, MARKER_COLORS
    _, h, w = (int(v) for v in grid[0]); H, W = h // 2, w // 2
    packed = lambda rgb: (rgb[..., 0] >> 7) | (rgb[..., 1] >> 7) << 1 | (rgb[..., 2] >> 7) << 2
    mask_img = packed(np.asarray(draw_markers(Image.new("RGB", (scene_t.width, scene_t.height)), scene_t, q_t)))
    ys = np.linspace(0, scene_t.height, H + 1).round().astype(int); xs = np.linspace(0, scene_t.width, W + 1).round().astype(int)
    t = np.zeros((H, W, AUX_CHANNELS), np.float32); m = np.zeros_like(t)
    for c, name in enumerate(MARKER_COLORS):
        hit = mask_img == packed(np.array(MARKER_RGB[name], np.uint8))
        t[..., c] = np.logical_or.reduceat(np.logical_or.reduceat(hit, ys[:-1], axis=0), xs[:-1], axis=1)
    m[..., :3] = 1
    first, second = (2, 3) if q_t.task == "relative_distance" else (1, 2)
    canon = replace(q_t, relation=0, order=(first, second))
    k = 3 + AUX_TASKS.index(q_t.task)
    t[..., k] = float(ground_truth(scene_t, canon)); m[..., k] = 1
    t[..., -2] = ((np.arange(H) + 0.5) / H)[:, None]; t[..., -1] = ((np.arange(W) + 0.5) / W)[None, :]; m[..., -2:] = 1
    return t.reshape(-1, AUX_CHANNELS), m.reshape(-1, AUX_CHANNELS)


def aux_loss(pred, target, mask):
    "BCE on the presence and fact channels, MSE on row/col; mean over the masked entries."
    import torch.nn.functional as F
    bce = F.binary_cross_entropy_with_logits(pred[:, :-2], target[:, :-2], reduction="none") * mask[:, :-2]
    mse = (torch.sigmoid(pred[:, -2:]) - target[:, -2:]) ** 2 * mask[:, -2:] * 10
    return (bce.sum() + mse.sum()) / mask.sum()
