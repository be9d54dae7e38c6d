"""The analyse stage: from stored samples to summaries, comparisons, verdicts, recommendations."""
