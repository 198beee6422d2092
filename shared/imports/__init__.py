"""Nightly per-account eligibility imports (CSV and X12 834) into the `Members` table.

One run per account per night, accounts in parallel, every table write fenced by the
account lease's token. Modules are small on purpose: accounts, layout, request, text stream,
csv/edi readers, validation, duplicate index, fenced member writer, rejects, file mover,
report, summary email, and the importer that ties them together.
"""
