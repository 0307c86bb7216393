// POST /api/v1/refunds: refund a payment through the (simulated) processor, claim-first mode.
import { onlyPost } from '@/app/_lib/method-not-allowed';
import { runtime } from '@/app/_lib/runtime';

export const dynamic = 'force-dynamic';

export async function POST(request: Request): Promise<Response> {
  return (await runtime()).demo.refunds(request);
}

export const { GET, PUT, PATCH, DELETE } = onlyPost();
