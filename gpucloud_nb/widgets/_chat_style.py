"""The chat panel's stable CSS classes and its own style sheet (no script).

    >>> CSS_CLASSES["send"]
    'gpucloud-chat-send'
"""

from __future__ import annotations

__all__ = ["CSS_CLASSES", "GROUP_SIZE", "STYLE_SHEET"]

#: Every stable CSS class the panel puts on its parts (for browser tests and custom styling).
CSS_CLASSES = {
    "root": "gpucloud-chat",
    "model": "gpucloud-chat-model",
    "temperature": "gpucloud-chat-temperature",
    "max_tokens": "gpucloud-chat-max-tokens",
    "system": "gpucloud-chat-system",
    "clear": "gpucloud-chat-clear",
    "messages": "gpucloud-chat-messages",
    "message": "gpucloud-chat-message",
    "user": "gpucloud-chat-message-user",
    "assistant": "gpucloud-chat-message-assistant",
    "streaming": "gpucloud-chat-streaming",
    "stopped": "gpucloud-chat-stopped",
    "error": "gpucloud-chat-error",
    "input": "gpucloud-chat-input",
    "send": "gpucloud-chat-send",
    "stop": "gpucloud-chat-stop",
    "attachments": "gpucloud-chat-attachments",
    "attachment": "gpucloud-chat-attachment",
    "upload_image": "gpucloud-chat-upload-image",
    "upload_audio": "gpucloud-chat-upload-audio",
    "audio_send": "gpucloud-chat-audio-send",
    "upload_hint": "gpucloud-chat-upload-hint",
    "status": "gpucloud-chat-status",
    "style": "gpucloud-chat-style",
}


GROUP_SIZE = 4  # block widgets per sub-box of a streamed reply (keeps each children update small)

# Our own style sheet, no script: an HTML widget may carry a <style> element.
#
# The transcript is a flex column with a maximum height that scrolls as a whole. ipywidgets
# boxes are ``overflow:auto`` flex items that may shrink, so without ``flex:none`` and
# ``overflow:visible`` on each message, a full transcript squeezes every bubble to a sliver with
# its own scrollbar. Every colour is a JupyterLab theme variable (light and dark alike).
STYLE_SHEET = """<style>
.gpucloud-chat{min-width:0;max-width:100%}
.gpucloud-chat .gpucloud-chat-system{width:auto;align-self:stretch}
.gpucloud-chat-messages{max-height:32em;overflow-x:hidden;overflow-y:auto;flex:none;
overflow-anchor:none}
.gpucloud-chat-messages>*{flex:none}
.gpucloud-chat-message{border-radius:6px;padding:2px 10px;margin:4px 0;flex:none;
overflow:visible;min-height:min-content;max-width:100%;box-sizing:border-box}
.gpucloud-chat-message>*{flex:none;overflow:visible}
.gpucloud-chat-message::before{font-size:0.75em;color:var(--jp-ui-font-color2)}
.gpucloud-chat-message-user{background:var(--jp-layout-color2);color:var(--jp-ui-font-color1);
margin-left:12%}
.gpucloud-chat-message-user::before{content:"You";color:var(--jp-ui-font-color1)}
.gpucloud-chat-message-assistant{border:1px solid var(--jp-border-color2);margin-right:6%}
.gpucloud-chat-message-assistant::before{content:"Assistant"}
.gpucloud-chat-streaming{border-style:dashed}
.gpucloud-chat-message .widget-html,.gpucloud-chat-error.widget-html{height:auto;margin:0}
.gpucloud-chat-message .widget-html-content,.gpucloud-chat-error .widget-html-content{
line-height:1.5;white-space:normal;color:inherit}
.gpucloud-chat-message p{margin:0.35em 0}
.gpucloud-chat-message pre{white-space:pre;overflow-x:auto;padding:6px;
background:var(--jp-layout-color2)}
.gpucloud-chat-message code{white-space:pre-wrap}
.gpucloud-chat-message pre code{white-space:pre}
.gpucloud-chat-message img,.gpucloud-chat-attachment img{height:auto;object-fit:contain;flex:none}
.gpucloud-chat-error,.gpucloud-chat-error .widget-html-content{
color:color-mix(in srgb,var(--jp-error-color1) 70%,var(--jp-ui-font-color0))}
.gpucloud-chat-upload-hint .widget-html-content{line-height:1.3;color:var(--jp-ui-font-color2)}
.gpucloud-chat-stopped{color:var(--jp-ui-font-color2);font-style:italic}
</style>"""
