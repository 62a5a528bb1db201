"""Stage 2, the .gpuobs file: its record layouts (from the schema header), its framing, the
reader that loads it into a Recording, and a writer (for trimming and synthetic recordings)."""
