"""Export and import of an agent's memory (JSONL, mem0): an operation of the memory service
(``dream_assets.service.transfer``), named here too for the code that imports it from the folders."""

from dream_assets.service.transfer import ImportRefused, export_jsonl, export_mem0, import_jsonl, import_mem0

__all__ = ["ImportRefused", "export_jsonl", "export_mem0", "import_jsonl", "import_mem0"]
