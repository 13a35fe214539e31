import { formatLost, ILostKernel } from '../src/lostFormat';

function row(fields: Partial<ILostKernel> = {}): ILostKernel {
  return {
    kernelId: '0123456789abcdef',
    notebook: 'project/train.ipynb',
    instance: 'box (i-1)',
    sentence: 'Instance box (i-1) was deleted from outside this notebook, so its kernel and variables are gone; …',
    checkpoint: '20261128T1502-box.gpucloud',
    state: 'lost',
    progress: '',
    message: '',
    ...fields
  };
}

describe('formatLost', () => {
  it('names the notebook, shows the kernel sentence and offers Restore with its checkpoint', () => {
    const text = formatLost(row());
    expect([text.name, text.status, text.detail]).toEqual(['train.ipynb', 'instance lost', row().sentence]);
    expect([text.canRestore, text.showRestore, text.restoreLabel]).toEqual([true, true, 'Restore']);
    expect(text.restoreTitle).toBe(
      'Launch an instance like box (i-1) and restore checkpoint 20261128T1502-box.gpucloud into ' +
        "this notebook's kernel."
    );
  });

  it('cannot restore without a checkpoint, and says why', () => {
    const text = formatLost(row({ checkpoint: '' }));
    expect(text.canRestore).toBe(false);
    expect(text.restoreTitle).toBe("There is no checkpoint of this kernel's variables in its notebook's folder.");
  });

  it('shows the progress while restoring, with the button disabled', () => {
    const text = formatLost(row({ state: 'restoring', progress: 'Launching box-l4-abcd…' }));
    expect([text.status, text.detail, text.canRestore, text.restoreLabel]).toEqual([
      'restoring…',
      'Launching box-l4-abcd…',
      false,
      'Restoring…'
    ]);
  });

  it('shows the one sentence of a failure and lets it be tried again', () => {
    const text = formatLost(row({ state: 'failed', message: 'The restore did not happen (x).' }));
    expect([text.status, text.detail, text.canRestore]).toEqual(['restore failed', 'The restore did not happen (x).', true]);
  });

  it('hides the button once restored and names a kernel without a notebook by its id', () => {
    const text = formatLost(row({ state: 'restored', message: 'Restored …', notebook: '' }));
    expect([text.name, text.status, text.showRestore, text.canRestore]).toEqual([
      'kernel 01234567',
      'restored',
      false,
      false
    ]);
  });
});
