"""A tiny causal language model with random weights, built on the spot: no download, for tests."""

from __future__ import annotations

from pathlib import Path


def build_tiny_causal_lm(folder: Path) -> Path:
    """A two-layer GPT-2 with random weights, and a byte-level BPE tokenizer trained on four sentences."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    sentences = ["the cat sat on the mat", "a dog ran in the park", "semantic caches answer questions", "hello, café"]
    bpe.train_from_iterator(sentences, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<pad>")
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=128,
        vocab_size=len(tokenizer),
        initializer_range=1.0,  # large weights: greedy answers differ from prompt to prompt
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # special tokens score 0 while real ones score in the tens: greedy never ends early
        model.transformer.wte.weight[[tokenizer.eos_token_id, tokenizer.pad_token_id]] = 0.0
    model.save_pretrained(folder)
    return folder
