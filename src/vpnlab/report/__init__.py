"""The report stage: what a reader gets: the HTML report, export, the seeds' verdict table (docs/seeds.md), files written for the user."""
