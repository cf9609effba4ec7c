"""Checks that `hat data gen` JSONL loads in TRL's SFTTrainer as it is, and takes one step.

Usage (the venv of bench_pytorch.sh plus `pip install trl datasets`):
    python check_trl.py DATA.jsonl HF_MODEL_DIR [records]

DATA.jsonl is `hat data gen` output (OpenAI `messages` + `tools` and metadata columns);
HF_MODEL_DIR a Hugging Face folder, e.g. `hat train export RUN --format hf --out DIR`.
Prints the rendered start of the first conversation, the loss of one optimiser step, and
what differs from `hat train sft` (see the notes at the end).
"""

import json
import sys

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer


def main() -> None:
    data, model_dir = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    # the file as it is: datasets reads the JSONL; only `messages` is needed by SFTTrainer
    ds = datasets.load_dataset("json", data_files=data, split=f"train[:{n}]")
    print("columns:", ", ".join(ds.column_names))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    first = tok.apply_chat_template(ds[0]["messages"], tokenize=False)
    print("rendered (start):", json.dumps(first[:300]))
    cfg = SFTConfig(
        output_dir="/tmp/hat-trl-check",
        max_steps=1,
        per_device_train_batch_size=1,
        max_length=4096,
        learning_rate=1e-5,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=cfg,
        train_dataset=ds.select_columns(["messages"]),
        processing_class=tok,
    )
    out = trainer.train()
    print(f"one step: training loss {out.training_loss:.4f}")


if __name__ == "__main__":
    main()
