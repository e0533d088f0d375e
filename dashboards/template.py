"""The page skeleton (``string.Template``): inline CSS, no script, nothing fetched from the network."""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>$title</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
header { background: #1f3a5f; color: #fff; padding: 14px 28px; }
header h1 { margin: 0 0 4px; font-size: 21px; }
header p { margin: 2px 0; font-size: 13px; opacity: 0.9; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #d8dce3; padding: 8px 28px; z-index: 1; }
nav a { margin-right: 18px; color: #1f3a5f; text-decoration: none; font-size: 14px; font-weight: 600; }
main { padding: 10px 28px 40px; max-width: 1500px; }
section { background: #fff; border: 1px solid #d8dce3; border-radius: 6px; padding: 6px 20px 16px; margin: 16px 0; }
h2 { font-size: 18px; color: #1f3a5f; }
.intro { font-size: 13px; color: #485063; max-width: 1100px; }
.note { font-size: 13px; background: #eef3f9; padding: 6px 10px; border-radius: 4px; }
.running { background: #fff4d6; border: 1px solid #e6c25a; padding: 8px 12px; border-radius: 4px; font-weight: 600; }
.selection { background: #fde8e6; border: 1px solid #d9534f; padding: 8px 12px; border-radius: 4px; font-weight: 600; }
figure { display: inline-block; margin: 8px 14px 8px 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #e3e6eb; }
figcaption { font-size: 12px; color: #485063; }
.file { color: #8a93a5; margin-left: 6px; }
.table-box { max-width: 100%; overflow-x: auto; margin: 10px 0; }
table { border-collapse: collapse; font-size: 12.5px; margin: 0; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-size: 12px; color: #485063; padding-bottom: 4px; }
th, td { border: 1px solid #d8dce3; padding: 3px 8px; text-align: left; }
th { background: #eef1f5; }
tbody tr:nth-child(even) { background: #fafbfc; }
ul { font-size: 13px; }
</style>
</head>
<body>
<header>
<h1>dmlstudy dashboard: $names</h1>
<p>Built $built from MLflow at <code>$uri</code></p>
</header>
<nav>$nav</nav>
<main>
$status
<ul>$studies</ul>
$panels
$skipped
</main>
</body>
</html>
"""
