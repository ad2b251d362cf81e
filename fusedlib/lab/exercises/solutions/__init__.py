"""Solutions of the course's exercises, one module a notebook: open the one you need when stuck."""
