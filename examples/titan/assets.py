"""Makes the small dataset and tokenizer that the TorchTitan runs train on.

TorchTitan's debug config reads `tests/assets/c4_test` and a test tokenizer
from its source tree; neither ships in the wheel, and nothing may be
downloaded here. So we write our own: a few thousand lines of text from a
tiny seeded grammar (repetitive enough that a 6-layer model's loss falls
within a handful of steps) in the layout `datasets.load_dataset(dir)` reads
as JSON lines, and a byte-level BPE tokenizer trained on it with the
`tokenizers` library, saved as tokenizer.json + tokenizer_config.json (what
torchtitan's HuggingFaceTokenizer loads).
"""
import json
import os
import random
import sys

SUBJECTS = ["the cat", "a dog", "the small bird", "my neighbour", "the old man",
            "a young girl", "the teacher", "our team", "the farmer", "a stranger"]
VERBS = ["sees", "likes", "follows", "paints", "finds", "carries", "watches",
         "builds", "remembers", "visits"]
OBJECTS = ["the red house", "a green tree", "the river", "an open window",
           "the long road", "a wooden boat", "the quiet garden", "a bright star",
           "the city market", "a cold morning"]
ENDINGS = ["every day", "in the evening", "with great care", "again and again",
           "before the rain", "after lunch", "near the hill", "without a word"]

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def _document(rng):
    sentences = []
    for _ in range(rng.randint(4, 12)):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        if rng.random() < 0.6:
            s += " " + rng.choice(ENDINGS)
        sentences.append(s[0].upper() + s[1:] + ".")
    return " ".join(sentences)


def make(root, documents=2000, vocab_size=2048, seed=0):
    """Writes root/data (dataset dir) and root/tokenizer; returns their paths.
    Idempotent: existing files are kept."""
    data_dir = os.path.join(root, "data")
    tok_dir = os.path.join(root, "tokenizer")
    data_file = os.path.join(data_dir, "train.jsonl")
    if not os.path.exists(data_file):
        os.makedirs(data_dir, exist_ok=True)
        rng = random.Random(seed)
        with open(data_file + ".tmp", "w") as f:
            for _ in range(documents):
                f.write(json.dumps({"text": _document(rng)}) + "\n")
        os.replace(data_file + ".tmp", data_file)
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        os.makedirs(tok_dir, exist_ok=True)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=[BOS, EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        with open(data_file) as f:
            texts = [json.loads(line)["text"] for line in f]
        tok.train_from_iterator(texts, trainer=trainer)
        tok.save(os.path.join(tok_dir, "tokenizer.json"))
        with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": BOS, "eos_token": EOS,
                       "add_bos_token": True, "add_eos_token": True}, f)
    return data_dir, tok_dir


if __name__ == "__main__":
    print(make(sys.argv[1] if len(sys.argv) > 1 else "build/titan-assets"))
