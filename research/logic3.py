"""Text-only: can the tiny LM learn the 'claim' scaffold? prompt 'is S REL O?' then think 'word0 W; word0 C' (C = the
object the question claims is word0), answer W == C.  python research/logic3.py STEPS [lr]"""
import sys, time, os, numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain as P
from consistency_amp.training.tiny_models import train_tiny_tokenizer
from consistency_amp.world.tasks import RELATION_PHRASES, BOOLEAN_TASKS
from transformers import Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(1); torch.manual_seed(0)
tok = train_tiny_tokenizer(); r = P.Recipe()
model = Qwen2_5_VLForConditionalGeneration(P.model_config(r, tok)).train()
rng = np.random.default_rng(0)
def sample(n):
    texts, plens = [], []
    for _ in range(n):
        t = BOOLEAN_TASKS[rng.integers(4)]; first = 2 if t == "relative_distance" else 1
        W, S, rel = first + rng.integers(2), first + rng.integers(2), int(rng.integers(2))
        O = 2 * first + 1 - S; word = P.WORD0[t]; phrase = RELATION_PHRASES[t][rel]
        C = S if rel == 0 else O
        prompt = f"<|im_start|>user\nIs object {S} {phrase} object {O}?<|im_end|>\n<|im_start|>assistant\n"
        texts.append(prompt + f"<think>{word} {W}; {word} {C}</think><answer>{W == C}</answer><|im_end|>")
        plens.append(len(tok(prompt)["input_ids"]))
    enc = tok(texts, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    for i, k in enumerate(plens): labels[i, :k] = -100
    return enc, labels
opt = torch.optim.AdamW(model.parameters(), lr=float(sys.argv[2]) if len(sys.argv) > 2 else 1e-3, weight_decay=0.01)
ans_ids = torch.tensor([tok.convert_tokens_to_ids(">True"), tok.convert_tokens_to_ids(">False")])
digit_ids = torch.tensor([tok.convert_tokens_to_ids(d) for d in ("1", "2", "3")])
t0 = time.time()
for step in range(int(sys.argv[1])):
    enc, labels = sample(64)
    loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad()
    if (step + 1) % 100 == 0:
        with torch.no_grad():
            enc, labels = sample(256); model.eval()
            pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, :-1].argmax(-1); model.train()
            lab = labels[:, 1:]; m = torch.isin(lab, ans_ids)
            dm = torch.isin(lab, digit_ids)
            c_ok = [(pred[j][dm[j]][-1] == lab[j][dm[j]][-1]).item() for j in range(lab.shape[0]) if dm[j].sum() >= 2]
            print(step + 1, round(time.time() - t0, 1), "loss", round(loss.item(), 3), "C acc", round(float(np.mean(c_ok)), 3),
                  "answer acc", round((pred[m] == lab[m]).float().mean().item(), 3), flush=True)
