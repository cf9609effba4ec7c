#!/bin/sh
# Blocks replies that make medical claims (advertising law for cosmetics and food).
# Input: the hook event as JSON on stdin; only the draft "reply" field is checked,
# so a viewer asking "does it cure acne?" does not block an honest answer.
# Exit 2 with a reason on stderr blocks the reply.
reply=$(sed -n 's/.*"reply":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
if printf '%s' "$reply" | grep -qiE '\b(cures?|treats?|heals?|therapy|medical[- ]grade)\b|治疗|治愈|药效'; then
  echo "medical claims are not allowed; describe the product's ingredients or feel instead." >&2
  exit 2
fi
exit 0
