"""The report stage: what a reader gets: the HTML report, export, the README's verdict table, files written for the user."""
