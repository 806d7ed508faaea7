"""Text-only logic stage with the REAL question text: does the LM learn the answer with think THINK?
THINK=ask: '{IDX0} {rel}; {word} {C}; {word} {W}' (copy subject and relation, then the claimed object from the two
previous tokens, then the seen fact); answer = (C == W).   THINK=claim: the module's think.
python research/logic4.py STEPS LR THINK  (env AW: answer-token loss weight, INIT: a state dict to start from)"""
import sys, time, json, numpy as np, torch
from dataclasses import replace
from consistency_amp.training.pretraining import *
from consistency_amp.training.think_targets import *
from consistency_amp.training.pretraining import reword
from consistency_amp.training.think_targets import FACT_WORDS, fact_text
from consistency_amp.world.prompts import prompt_text
from consistency_amp.world.tasks import ground_truth, RELATION_PHRASES
from consistency_amp.training.tiny_models import train_tiny_tokenizer
from transformers import Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(1); torch.manual_seed(0)
steps, lr, think = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
warm = 50
import os; AW = float(os.environ.get("AW", "1")); INIT = os.environ.get("INIT")
r = BaseRecipe(images_per_source=300)
train, val = pretraining_examples(r)
tok = train_tiny_tokenizer()
model = Qwen2_5_VLForConditionalGeneration(base_config(r, tok)).train()
if INIT: model.load_state_dict(torch.load(INIT))
rng = np.random.default_rng(0)
def think_text(e, q):
    word, W = FACT_WORDS[q.task], fact_text(e.scene, q).split()[1]
    C = q.order[0] if q.relation == 0 else q.order[1]
    assert (str(C) == W) == ground_truth(e.scene, q)
    if think == "claim": return f"{word} {W}; {word} {C}", []
    rel = RELATION_PHRASES[q.task][q.relation].split()[0]
    if think == "match": return f" {word} {W}; {q.order[0]} {rel}; {word} {C}{str(C) == W}", []
    return f" {q.order[0]} {rel}; {word} {C}; {word} {W}", ["s1", "rel", "word", "C", "word", "W"]
def sample(pool, n):
    texts, plens = [], []
    for i in rng.integers(len(pool), size=n):
        e = pool[i]; q = reword(rng, e.question)
        prompt = f"<|im_start|>user\n{prompt_text(e.scene, q)}<|im_end|>\n<|im_start|>assistant\n"
        texts.append(prompt + f"<think>{think_text(e, q)[0]}</think><answer>{ground_truth(e.scene, q)}</answer><|im_end|>")
        plens.append(len(tok(prompt)["input_ids"]))
    side, tok.padding_side = tok.padding_side, "right"
    enc = tok(texts, padding=True, return_tensors="pt"); tok.padding_side = side
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    for j, k in enumerate(plens): labels[j, :k] = -100
    return enc, labels, plens
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
ans_ids = torch.tensor([tok.convert_tokens_to_ids(">True"), tok.convert_tokens_to_ids(">False")])
digits = torch.tensor([tok.convert_tokens_to_ids(d) for d in ("1", "2", "3")])
t0 = time.time()
for step in range(steps):
    enc, labels, _ = sample(train, 64)
    logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, :-1]
    lab = labels[:, 1:]; w = torch.where(torch.isin(lab, ans_ids), AW, 1.0) * (lab != -100)
    loss = (torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1).clamp(min=0), reduction="none") * w.reshape(-1)).sum() / w.sum()
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad()
    if (step + 1) % 100 == 0:
        with torch.no_grad():
            enc, labels, plens = sample(val, 256); model.eval()
            pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, :-1].argmax(-1); model.train()
        lab = labels[:, 1:]; m = torch.isin(lab, ans_ids); dm = torch.isin(lab, digits)
        # digit positions in the completion, in order: ask -> s1, C, W ; claim -> W, C
        acc = {}
        names = ["s1", "C", "W"] if think == "ask" else ["W", "s1", "C"] if think == "match" else ["W", "C"]
        for k, nm in enumerate(names):
            acc[nm] = round(float(np.mean([(pred[j][dm[j]][k] == lab[j][dm[j]][k]).item() for j in range(lab.shape[0])])), 3)
        if think == "match":
            mt = torch.isin(lab, torch.tensor([tok.convert_tokens_to_ids("True"), tok.convert_tokens_to_ids("False")]))
            acc["match"] = round((pred[mt] == lab[mt]).float().mean().item(), 3)
        acc["answer"] = round((pred[m] == lab[m]).float().mean().item(), 3)
        acc["true_rate"] = round((pred[m] == ans_ids[0]).float().mean().item(), 3)
        print(json.dumps(dict(step=step + 1, secs=round(time.time() - t0), loss=round(loss.item(), 4)) | acc), flush=True)
torch.save(model.state_dict(), f"/tmp/logic4_{think}_{lr}_{AW}.pt")
