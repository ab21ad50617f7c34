"""The built-in directive files, one per model call (``dream.md``, ``skill-gap.md`` ...).

They live at the top of the project, where an operator looks for them, and are installed as the package data of
``dream_assets.directives`` (``pyproject.toml`` maps this folder onto that package), so ``importlib.resources`` finds
them the same way in a checkout with an editable install and in an installed wheel.
"""
