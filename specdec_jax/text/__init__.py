"""Text in and out: the demo pair's SentencePiece vocabulary and constants
(`vocabulary`), the decode job's inputs from text / TSV / JSONL files, seqio tasks or the
built-in examples (`inputs`), and seqio tasks on the shared data (`tasks`)."""
