"""The semantic model: what torchlint knows about the code it reads, a file per question.

Rules ask these modules (through ``RuleContext``'s cached analyses) instead of matching spellings
themselves; each question is answered once, in the file named for it.
"""
