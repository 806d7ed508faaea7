"""Long pretraining runs of the prototype on any device, with a teacher-forced held-out probe every `every` steps.
python research/gpu_sweep.py NAME '{"steps": 3000, ...}'  -> prints JSON lines; saves the model under $OUT/NAME."""
import json, math, os, sys, time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import pretrain as P
from consistency_amp.world.synthetic import default_world, SyntheticConfig
from consistency_amp.world.task_splits import build_task_splits
from consistency_amp.training.tiny_models import train_tiny_tokenizer
from transformers import Qwen2_5_VLForConditionalGeneration, GenerationConfig


def probe(model, processor, items, edges, r, device, bs=128):
    "Teacher-forced argmax accuracy of the fact digit and of the answer token, on the items' own wordings."
    tok = processor.tokenizer
    ans_ids = {tok.convert_tokens_to_ids(">True"), tok.convert_tokens_to_ids(">False")}
    digit_ids = {tok.convert_tokens_to_ids(d) for d in "123"}
    fact_ok, ans_ok, true_pred = [], [], []
    rr = replace(r, fixed_wording_fraction=0.0)
    if r.fixed_wording_fraction == 1: items = [(sc, P.reword(None, q, True), pv, g) for sc, q, pv, g in items]
    model.eval()
    with torch.no_grad():
        for i in range(0, len(items), bs):
            b = P.batch_inputs(items[i:i + bs], processor, None, edges, rr, reword_fn=False)
            b = {k: v.to(device) for k, v in b.items()}
            logits = model(**{k: v for k, v in b.items() if k != "labels"}).logits
            pred = logits[:, :-1].argmax(-1); lab = b["labels"][:, 1:]
            for j in range(lab.shape[0]):
                l = lab[j].tolist(); p = pred[j].tolist()
                pos_a = [k for k, t in enumerate(l) if t in ans_ids]
                pos_d = [k for k, t in enumerate(l) if t in digit_ids]
                if pos_a: ans_ok.append(p[pos_a[0]] == l[pos_a[0]]); true_pred.append(p[pos_a[0]] == tok.convert_tokens_to_ids(">True"))
                if pos_d and r.think in ("facts", "scaffold", "claim"): fact_ok.append(p[pos_d[0]] == l[pos_d[0]])
    model.train()
    return dict(answer=round(float(np.mean(ans_ok)), 3), fact=round(float(np.mean(fact_ok)), 3) if fact_ok else None,
                true_rate=round(float(np.mean(true_pred)), 3), n=len(ans_ok))


def aux_probe(model, head, cap, vpool, device):
    "Token-level accuracy of the aux head's colour and fact channels, and row/col error, on the val pool."
    model.eval(); ok_c, ok_f, err, per = [], [], [], {}
    with torch.no_grad():
        for (sc, q, pv, g), (t, m) in zip(vpool.items, vpool.aux):
            model.model.visual(pv.to(device), grid_thw=g.to(device))
            p = head(cap["v"]).cpu().numpy()
            ok_c.append(((p[:, :3] > 0) == (t[:, :3] > 0.5)).mean())
            k = m[0, 3:-2].argmax() + 3
            ok_f.append(((p[:, k] > 0) == (t[:, k] > 0.5)).mean()); per.setdefault(q.task, []).append(ok_f[-1])
            err.append(np.abs(1 / (1 + np.exp(-p[:, -2:])) - t[:, -2:]).mean())
    model.train()
    return dict(v_colour=round(float(np.mean(ok_c)), 3), v_fact=round(float(np.mean(ok_f)), 3), v_pos_err=round(float(np.mean(err)), 3), v_task={t[:5]: round(float(np.mean(v)), 3) for t, v in per.items()})


def main(name, kw):
    every = kw.pop("every", 250); aux_w = kw.pop("aux", 0.0); vision_steps = kw.pop("vision_steps", 0); logic_steps = kw.pop("logic_steps", 0); vision_lr = kw.pop("vision_lr", 2e-3); device = kw.pop("device", "cuda" if torch.cuda.is_available() else "cpu")
    out_root = Path(os.environ.get("OUT", "/tmp/pretraining_probes")) / name
    r = P.Recipe(**kw)
    P.VALUES = P.cue_values if r.think == "cues" else P.task_values
    torch.set_num_threads(r.threads); torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()
    world = default_world(SyntheticConfig(seed=r.world_seed, n_images_per_split={"train": r.images_per_source}, sources=r.sources))
    tasks = tuple(r.tasks)
    splits = build_task_splits(world, tasks=tasks, sources=r.sources, max_per_image=r.max_per_image, seed=r.seed)
    train = {t: [e for s in r.sources for e in splits[(t, s)].train] for t in tasks}
    val = [e for t in tasks for s in r.sources for e in splits[(t, s)].test]
    edges = P.quantiles(train)
    tok = train_tiny_tokenizer(); processor = P.make_processor(r, tok)
    rng = np.random.default_rng(r.seed)
    pool = P.Pool([e for t in tasks for e in train[t]], processor, rng, variants=r.variants, aux=aux_w > 0)
    vrng = np.random.default_rng(1)
    vsel = [val[i] for i in vrng.permutation(len(val))[:512]]
    vpool = P.Pool(vsel, processor, vrng, variants=1, aux=aux_w > 0)
    print(json.dumps(dict(name=name, event="ready", secs=round(time.time() - t0, 1), pool=len(pool.items), val=len(vpool.items))), flush=True)
    torch.manual_seed(r.seed)
    model = Qwen2_5_VLForConditionalGeneration(P.model_config(r, tok)).to(device)
    model.generation_config = GenerationConfig(bos_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
                                               eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")])
    head = torch.nn.Linear(r.hidden, P.AUX_CHANNELS).to(device); cap = {}
    model.model.visual.register_forward_hook(lambda mod, a, o: cap.__setitem__("v", o.pooler_output))
    if vision_steps:
        vparams = list(model.model.visual.parameters()) + list(head.parameters())
        vopt = torch.optim.AdamW(vparams, lr=vision_lr, weight_decay=0.01)
        vs = torch.optim.lr_scheduler.LambdaLR(vopt, lambda s: min(1, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / vision_steps)))
        t0 = time.time(); vl = []
        for step in range(vision_steps):
            idx = rng.integers(len(pool.items), size=r.batch)
            pv = torch.cat([pool.items[i][2] for i in idx]).to(device); g = torch.cat([pool.items[i][3] for i in idx]).to(device)
            model.model.visual(pv, grid_thw=g)
            tg = torch.from_numpy(np.concatenate([pool.aux[i][0] for i in idx])).to(device)
            mk = torch.from_numpy(np.concatenate([pool.aux[i][1] for i in idx])).to(device)
            al = P.aux_loss(head(cap["v"]), tg, mk); al.backward(); torch.nn.utils.clip_grad_norm_(vparams, 1.0)
            vopt.step(); vs.step(); vopt.zero_grad(); vl.append(al.item())
            if (step + 1) % every == 0 or step == vision_steps - 1:
                pr = aux_probe(model, head, cap, vpool, device)
                print(json.dumps(dict(name=name, vision_step=step + 1, secs=round(time.time() - t0), aux=round(float(np.mean(vl[-every:])), 4)) | pr), flush=True)
    if logic_steps:
        from consistency_amp.world.prompts import prompt_text
        lopt = torch.optim.AdamW(model.model.language_model.parameters(), lr=r.lr, weight_decay=0.01)
        ans_ids = torch.tensor([tok.convert_tokens_to_ids(">True"), tok.convert_tokens_to_ids(">False")])
        t0 = time.time()
        for step in range(logic_steps):
            texts, plens = [], []
            for i in rng.integers(len(pool.items), size=r.batch):
                scene, q = pool.items[i][0], P.reword(rng, pool.items[i][1])
                prompt = f"<|im_start|>user\n{prompt_text(scene, q)}<|im_end|>\n<|im_start|>assistant\n"
                texts.append(prompt + P.completion(scene, q, None, r.think) + "<|im_end|>"); plens.append(len(tok(prompt)["input_ids"]))
            side, tok.padding_side = tok.padding_side, "right"
            enc = tok(texts, padding=True, return_tensors="pt"); tok.padding_side = side
            labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
            for j, k in enumerate(plens): labels[j, :k] = -100
            out = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device), labels=labels.to(device))
            out.loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); lopt.step(); lopt.zero_grad()
            if (step + 1) % every == 0:
                lab = labels[:, 1:].to(device); pred = out.logits[:, :-1].argmax(-1); m = torch.isin(lab, ans_ids.to(device))
                print(json.dumps(dict(name=name, logic_step=step + 1, secs=round(time.time() - t0), loss=round(out.loss.item(), 4),
                                      train_answer=round((pred[m] == lab[m]).float().mean().item(), 3))), flush=True)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=r.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / r.warmup) * 0.5 * (1 + math.cos(math.pi * min(s, r.steps) / r.steps)))
    model.train(); t0 = time.time(); losses, aux_losses = [], [0.0]
    for step in range(r.steps):
        idx = rng.integers(len(pool.items), size=r.batch)
        b = P.batch_inputs([pool.items[i] for i in idx], processor, rng, edges, r)
        b = {k: v.to(device) for k, v in b.items()}
        loss = model(**b).loss
        if aux_w > 0:
            tg = torch.from_numpy(np.concatenate([pool.aux[i][0] for i in idx])).to(device)
            mk = torch.from_numpy(np.concatenate([pool.aux[i][1] for i in idx])).to(device)
            al = P.aux_loss(head(cap["v"]), tg, mk); aux_losses.append(al.item()); loss = loss + aux_w * al
        loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad()
        losses.append(loss.item())
        late = time.time() > float(os.environ.get("DEADLINE", "inf"))
        if (step + 1) % every == 0 or step == r.steps - 1 or late:
            pr = probe(model, processor, vpool.items, edges, r, device)
            if aux_w > 0: pr |= aux_probe(model, head, cap, vpool, device)
            print(json.dumps(dict(name=name, step=step + 1, secs=round(time.time() - t0), loss=round(float(np.mean(losses[-every:])), 4), aux=round(float(np.mean(aux_losses[-every:])), 4)) | pr), flush=True)
        if late: break
    out_root.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out_root); processor.save_pretrained(out_root); (out_root / "edges.json").write_text(json.dumps(edges))
    (out_root / "recipe.json").write_text(json.dumps(kw | dict(name=name)))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
