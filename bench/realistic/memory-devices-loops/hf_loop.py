import math

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, get_scheduler


def evaluate(model, eval_dataloader, accelerator):
    model.eval()
    losses = []
    for step, batch in enumerate(eval_dataloader):
        with torch.no_grad():
            outputs = model(**batch)
        loss = outputs.loss
        losses.append(accelerator.gather_for_metrics(loss.repeat(8)))
    losses = torch.cat(losses)
    try:
        perplexity = math.exp(torch.mean(losses))
    except OverflowError:
        perplexity = float("inf")
    return perplexity


def main(train_dataset, eval_dataset, args):
    accelerator = Accelerator()
    model = AutoModelForCausalLM.from_pretrained(args.model)
    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=8, pin_memory=True)
    eval_dataloader = DataLoader(eval_dataset, batch_size=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader)
    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        total_loss = 0
        for step, batch in enumerate(train_dataloader):
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            outputs = model(**batch)
            loss = outputs.loss
            total_loss += loss.detach().float()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            completed_steps += 1
            if completed_steps % args.checkpointing_steps == 0:
                accelerator.save_state(f"step_{completed_steps}")
        ppl = evaluate(model, eval_dataloader, accelerator)
        accelerator.print(f"epoch {epoch}: perplexity: {ppl} train_loss: {total_loss.item() / len(train_dataloader)}")
