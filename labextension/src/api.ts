import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A failed call to the server extension, with one sentence to show. */
export class ApiError extends Error {}

/**
 * Call `/gpucloud/<path>` on the Jupyter server with the page's auth and XSRF token;
 * the decoded JSON body, or `null` for an empty answer.
 */
export async function requestAPI<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'gpucloud', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ApiError('The Jupyter server cannot be reached.');
  }
  const text = await response.text();
  let data: any = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const message = data && typeof data.message === 'string' ? data.message : '';
    throw new ApiError(message || `The server answered ${response.status} ${response.statusText}.`);
  }
  return data as T;
}
