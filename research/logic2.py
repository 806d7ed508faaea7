"""Text only: can the tiny LM learn an answer rule from completions alone?
THINK=scaffold ('W word; S REL') or steps ('W word; S E; asked REL', E = the subject's word);
MODE=three (the true rule, a parity of W, S, REL), two (answer = W == S) or first (answer = REL is the first word).
python research/logic2.py STEPS [lr]"""
import os, sys, time, json, numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain as P
from consistency_amp.training.tiny_models import train_tiny_tokenizer
from consistency_amp.world.tasks import RELATION_PHRASES, BOOLEAN_TASKS
from transformers import Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(1); torch.manual_seed(0); import os; MODE = os.environ.get("MODE", "three"); THINK = os.environ.get("THINK", "steps")
tok = train_tiny_tokenizer(); r = P.Recipe()
model = Qwen2_5_VLForConditionalGeneration(P.model_config(r, tok)).train()
rng = np.random.default_rng(0)
def sample(n):
    texts, answers = [], []
    for _ in range(n):
        t = BOOLEAN_TASKS[rng.integers(4)]; first = 2 if t == "relative_distance" else 1
        W, S, rel = first + rng.integers(2), first + rng.integers(2), int(rng.integers(2))
        word = P.WORD0[t]; R = RELATION_PHRASES[t][rel].split()[0]
        ans = (rel == 0) if MODE == "first" else (W == S) if MODE == "two" else (W == S) == (rel == 0)
        E = RELATION_PHRASES[t][0 if W == S else 1].split()[0]
        think = f"{W} {word}; {S} {E}; asked {R}" if THINK == "steps" else f"{W} {word}; {S} {R}"
        texts.append(f"<think>{think}</think><answer>{ans}</answer><|im_end|>"); answers.append(ans)
    enc = tok(texts, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return enc, labels, answers
opt = torch.optim.AdamW(model.parameters(), lr=float(sys.argv[2]) if len(sys.argv) > 2 else 1e-3, weight_decay=0.01)
ids = {tok.convert_tokens_to_ids(">True"), tok.convert_tokens_to_ids(">False")}
word_ids = {tok.convert_tokens_to_ids(" " + w) for t in RELATION_PHRASES for p in RELATION_PHRASES[t] for w in [p.split()[0]]}
def e_acc(pred, lab):
    ok = []
    for j in range(lab.shape[0]):
        pos = [k for k, t in enumerate(lab[j].tolist()) if t in word_ids]
        if len(pos) >= 2: ok.append(pred[j, pos[1]].item() == lab[j, pos[1]].item())
    return round(float(np.mean(ok)), 3)
t0 = time.time()
for step in range(int(sys.argv[1])):
    enc, labels, _ = sample(64)
    loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad()
    if (step + 1) % 100 == 0:
        with torch.no_grad():
            enc, labels, _ = sample(256); model.eval()
            pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, :-1].argmax(-1); model.train()
            lab = labels[:, 1:]; m = torch.isin(lab, torch.tensor(list(ids)))
            ok_e = e_acc(pred, lab)
            print(step + 1, "E acc", ok_e, round(time.time() - t0, 1), "loss", round(loss.item(), 3), "answer acc", round((pred[m] == lab[m]).float().mean().item(), 3), flush=True)
